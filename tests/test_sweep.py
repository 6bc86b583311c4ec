"""`magrpo-train -m` is a real multirun: one run directory per job, in parallel with joblib, and a
job with a bad value fails alone."""

import json
import subprocess
import sys
from pathlib import Path


def test_multirun_sweep_with_the_joblib_launcher_outlives_a_bad_job(tmp_path):
    # Two jobs in the launcher's two worker processes, each into its own directory; seed=-1 is a
    # config error, so that job fails alone (its worker never loads a model), is named at the end,
    # and the command exits 1.
    sweep = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "magrpo.train", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
           "debug=smoke", "seed=0,-1", "algo.max_new_tokens=8", "eval.num_items=1", "save_final=false",
           f"hydra.sweep.dir={sweep}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "1 of 2 job(s) failed" in proc.stderr and "job 1 (" in proc.stderr
    assert "seed=-1 is out of range" in proc.stderr
    assert "Traceback" not in proc.stderr
    runs = sorted(p.parent for p in Path(sweep).glob("*/summary.json"))
    assert [(r.name[:2], r.name.rsplit(",", 1)[-1]) for r in runs] == [("0_", "seed=0"), ("1_", "seed=-1")]
    assert f"  {runs[1].name}: status failed" in proc.stderr         # the report names the failed job's directory
    good, bad = (json.loads((r / "summary.json").read_text()) for r in runs)
    assert good["status"] == "finished" and good["config"]["seed"] == 0 and good["steps"] == 2
    assert bad["status"] == "failed" and "seed=-1" in bad["reason"]
    assert (sweep / "multirun.yaml").exists()
