"""`sandbox.isolation`: checked like every key, a named level that cannot run refuses to start,
`auto` falls back with one warning, and the level that ran is recorded.

Where namespaces are missing is simulated the way many containers lack them: a seccomp filter
that refuses unshare(2), installed in a fresh interpreter (it is inherited by every process
that interpreter starts, the sandbox's worker included).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from magrpo.core.schema import ConfigError
from magrpo.sandbox import LEVELS, isolation_level
from magrpo.validation.checks import validate

ROOT = Path(__file__).resolve().parents[1]
NO_UNSHARE = "from magrpo.sandbox.isolation import forbid_unshare\nassert forbid_unshare()\n"


def _python(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT, env=env)


def test_isolation_is_validated_naming_key_value_and_choices(make_cfg):
    with pytest.raises(ConfigError) as e:
        validate(make_cfg(["task=humaneval", "sandbox.isolation=banana"]))
    assert str(e.value) == ("sandbox.isolation='banana' is not allowed; choose one of: "
                            "auto, namespaces, uid, guards")
    typed = validate(make_cfg(["task=humaneval"]))
    assert typed.sandbox.isolation == "auto"
    # Checked for every task, though only the coding tasks run code.
    with pytest.raises(ConfigError, match="sandbox.isolation='docker'"):
        validate(make_cfg(["task=length_ratio", "sandbox.isolation=docker"]))


def test_a_named_level_that_runs_here_is_accepted(make_cfg):
    here = isolation_level()
    assert validate(make_cfg(["task=humaneval", f"sandbox.isolation={here}"])).sandbox.isolation == here
    assert validate(make_cfg(["task=humaneval", "sandbox.isolation=guards"])).sandbox.isolation == "guards"


def test_auto_falls_back_with_one_warning_without_namespaces():
    weaker = "uid" if os.geteuid() == 0 else "guards"  # uid needs root to switch users
    code = NO_UNSHARE + """
import json, warnings
from magrpo.sandbox import SandboxUnavailable, SandboxWarning, isolation_level, run_tests
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    levels = [isolation_level("auto"), isolation_level("auto")]
    rep = run_tests("def f(x):\\n    return x + 1\\n", ["assert f(1) == 2", "assert f(1) == 3"])
try:
    isolation_level("namespaces")
    refused = None
except SandboxUnavailable as e:
    refused = str(e)
print(json.dumps({"levels": levels, "ran": rep.isolation, "passed": rep.passed, "refused": refused,
                  "warnings": [str(w.message) for w in caught if issubclass(w.category, SandboxWarning)]}))
"""
    r = _python(code)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["levels"] == [weaker, weaker] and out["ran"] == weaker and out["passed"] == 1
    assert len(out["warnings"]) == 1, out["warnings"]
    assert f"weaker isolation '{weaker}'" in out["warnings"][0] and "namespaces" in out["warnings"][0]
    assert "'namespaces' is unavailable here" in out["refused"]


def test_magrpo_train_refuses_namespaces_where_there_are_none(tmp_path):
    code = NO_UNSHARE + "import sys\nfrom magrpo.cli.train import main\nsys.argv = ['magrpo-train', *sys.argv[1:]]\nmain()\n"
    r = _python(code, "task=humaneval", "sandbox.isolation=namespaces", "debug=smoke",
                f"hydra.run.dir={tmp_path / 'run'}")
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("magrpo-train:")]
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert "sandbox.isolation='namespaces' cannot run here" in lines[0]
    assert "choose one of: auto, namespaces, uid, guards" in lines[0]
    assert not (tmp_path / "run").exists()      # refused before any work: no run folder is left


def test_summary_records_the_level_that_ran(make_cfg, tmp_path):
    from magrpo.cli.train import run

    out = tmp_path / "run"
    run(make_cfg(["task=humaneval", "debug=smoke", "algo.max_new_tokens=8", "algo.num_generations=2",
                  "sandbox.isolation=guards"], out=str(out)))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["sandbox_isolation"] == "guards"
    assert isolation_level() in LEVELS


def test_the_reward_runs_at_the_configured_level():
    from magrpo.tasks import build_task
    from magrpo.tasks.coding import CodingRewardConfig, CodingTaskConfig

    task = build_task(OmegaConf.structured(CodingTaskConfig), OmegaConf.structured(CodingRewardConfig),
                      OmegaConf.create({"isolation": "guards"}))
    item = task.load("eval")[0]
    s = task.score([item], [[task.single_prompt(item)]], [[item["canonical_solution"]]])
    assert s.extras["isolation"] == ["guards"] and s.extras["passed"] == [True]
    assert task.run_info() == {"sandbox_isolation": "guards"}
    default = build_task(OmegaConf.structured(CodingTaskConfig), OmegaConf.structured(CodingRewardConfig))
    assert default.run_info() == {"sandbox_isolation": isolation_level()}
