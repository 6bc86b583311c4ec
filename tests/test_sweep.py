"""`magrpo-train -m` is a real multirun: one run directory per job, in parallel with joblib."""

import json
import subprocess
import sys
from pathlib import Path


def test_multirun_sweep_with_the_joblib_launcher(tmp_path):
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "magrpo.train", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
           "debug=smoke", "seed=0,1", "algo.max_new_tokens=8", "eval.num_items=1", "save_final=false",
           f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = sorted(p.parent for p in Path(sweep).glob("*/summary.json"))
    assert len(runs) == 2 and runs[0].name.startswith("0_") and runs[0].name.endswith("seed=0")
    seeds = [json.loads((r / "summary.json").read_text())["config"]["seed"] for r in runs]
    assert seeds == [0, 1]
    assert (sweep / "multirun.yaml").exists()


def test_bad_config_exits_2_with_the_message(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "magrpo.train", "algo.joint_mode=foo",
                           f"hydra.run.dir={tmp_path / 'bad'}"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "algo.joint_mode='foo' is not allowed; choose one of: aligned, cross" in proc.stdout + proc.stderr
