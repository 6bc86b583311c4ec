"""Runs fail loudly and locally: bad values stop a run before any work (exit 2, no traceback,
summary.json says why), a sweep outlives its failed jobs, run directories never collide,
damaged checkpoints are named and skipped, a resume must continue the same run, a killed run
reads as interrupted, and the installed wheel works from any directory."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from magrpo.cli.train import run
from magrpo.config.schemas import EvalRunSchema
from magrpo.core import checkpoint
from magrpo.core.checkpoint import CheckpointError, write_checkpoint
from magrpo.core.schema import ConfigError, SetupError
from magrpo.core.tracking import CLAIM_FILE, RunStatus, effective_status, process_record, read_status
from magrpo.validation.checks import validate
from tests import preloaded
from tests.conftest import compose_cfg, run_cli, small_tmpfs

ROOT = Path(__file__).resolve().parents[1]
TINY = ["algo.max_new_tokens=8", "eval.num_items=1"]


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


# -- every bad value is a clear error before any work ---------------------------------------------
# (overrides, what the message must contain: the key, the value, what is allowed)
BAD_INPUTS = [
    (["logger.log_every=0"], ["logger.log_every=0", ">= 1"]),
    (["logger.log_every=-1"], ["logger.log_every=-1", ">= 1"]),
    (["task.num_train=-5"], ["task.num_train=-5", ">= 1"]),
    (["task.num_eval=0"], ["task.num_eval=0", ">= 1"]),
    (["task.num_train=40"], ["task.num_train + task.num_eval", "40 + 16", "<= 48"]),
    (["reward.min_ratio=5"], ["reward.min_ratio=5.0", "reward.max_ratio=3.0", "min_ratio <= max_ratio"]),
    (["reward.scale=0"], ["reward.scale=0", "> 0"]),
    (["reward.min_ratio=nan"], ["reward.min_ratio=nan", "finite"]),
    (["optimizer.eps=-1"], ["optimizer.eps=-1", "> 0"]),
    (["optimizer.lr=inf"], ["optimizer.lr=inf", "finite"]),
    (["optimizer.betas=[0.9,1.5]"], ["optimizer.betas", "1.5", "[0, 1)"]),
    (["optimizer.weight_decay=-0.1"], ["optimizer.weight_decay=-0.1", ">= 0"]),
    (["hardware.device=banana"], ["hardware.device='banana'", "cpu, cuda, cuda:N, mps"]),
    (["hardware.device=cuda:99"], ["hardware.device='cuda:99'", "cpu"]),
    (["hardware.agent_devices=[cpu,gpu]"], ["hardware.agent_devices", "gpu", "cuda:N"]),
    (["eval.num_samples=0"], ["eval.num_samples=0", ">= 1"]),
    (["eval.num_items=0"], ["eval.num_items=0", ">= 1"]),
    (["eval.batch_size=0"], ["eval.batch_size=0", ">= 1"]),
    (["eval.do_sample=false"], ["eval.num_samples=2", "eval.do_sample=false", "num_samples=1"]),
    (["algo.epsilon=-1"], ["algo.epsilon=-1", "> 0"]),
    (["algo.num_generations=1"], ["algo.num_generations=1", ">= 2"]),
    (["seed=-1"], ["seed=-1", ">= 0"]),
    (["max_steps=-1"], ["max_steps=-1", ">= 0"]),
    (["save_every=-1"], ["save_every=-1", ">= 0"]),
    (["agents.num_agents=3"], ["agents.num_agents=3", "2 agents"]),
    (["agents=heterogeneous", "agents.num_agents=1"], ["agents.models has 2 entries", "agents.num_agents=1"]),
    (["agents.models.0.name_or_path=/no/such/model"], ["agents.models[0].name_or_path='/no/such/model'", "no such"]),
    (["+agents.models.0.tokenizer=/no/such/tok"], ["agents.models[0].tokenizer='/no/such/tok'", "no such"]),
    (["resume=/no/such/ckpt"], ["resume='/no/such/ckpt'", "no such"]),
    (["task=tldr", "task.data.path=/no/such.jsonl"], ["task.data.path='/no/such.jsonl'", "no such file"]),
    (["task=humaneval", "task.data.path=/no/such.jsonl"], ["task.data.path='/no/such.jsonl'", "no such file"]),
    (["task=tldr", "task.data.builtin=false", "task.data.hub_id=null"], ["task.data.builtin=false", "path", "hub_id"]),
    (["task=tldr", "task.data.train_split='train[:'"], ["task.data.train_split='train[:'", "NAME[lo:hi]"]),
    (["task=tldr", "task.data.limit=0"], ["task.data.limit=0", ">= 1"]),
    (["task=mbpp", "task.data.eval_split='test+'"], ["task.data.eval_split='test+'", "joined by '+'"]),
    (["task=humaneval", "task.show_tests=-1"], ["task.show_tests=-1", ">= 0"]),
    (["task=tldr", "reward.length_band_low=9"], ["reward.length_band_low=9.0", "reward.length_band_high=3.2",
                                                 "length_ramp_low <= length_band_low"]),
    (["task=arxiv", "reward.unique_band_high=null"], ["reward.unique_band_high=None", "both null"]),
    (["task=tldr", "reward.min_tokens=300"], ["reward.min_tokens=300", "reward.max_tokens=256"]),
    (["task=tldr", "reward.jaccard_cap=0"], ["reward.jaccard_cap=0", "> 0"]),
    (["task=tldr", "reward.lexicon=/no/lexicon.json"], ["reward.lexicon='/no/lexicon.json'", "no such file"]),
    (["task=tldr", "reward.scale=-1"], ["reward.scale=-1", "> 0"]),
    # A subclass that only changes a default (arxiv's min_tokens) keeps its parent's check.
    (["task=arxiv", "reward.min_tokens=-1"], ["reward.min_tokens=-1", ">= 0"]),
    (["task=arxiv", "reward.structure_reward=-1"], ["reward.structure_reward=-1", ">= 0"]),
    (["eval.temperature=${algo.nope}"], ["cannot resolve", "eval.temperature"]),
]


@pytest.mark.parametrize("overrides,needles", BAD_INPUTS, ids=[" ".join(o) for o, _ in BAD_INPUTS])
def test_bad_value_names_key_value_and_allowed(make_cfg, overrides, needles):
    with pytest.raises(ConfigError) as e:
        validate(make_cfg(overrides))
    for needle in needles:
        assert needle in str(e.value), f"{needle!r} missing from: {e.value}"


def test_bad_paths_of_resume_and_checkpoint(make_cfg, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    for value, needle in [(empty, "neither a checkpoint"), (a_file, "is a file")]:
        with pytest.raises(ConfigError, match=needle):
            validate(make_cfg([f"resume={value}"]))
        eval_cfg = compose_cfg([f"output_dir={tmp_path / 'e'}", f"checkpoint={value}"], "eval")
        with pytest.raises(ConfigError, match=needle):
            validate(eval_cfg, EvalRunSchema)


@pytest.mark.parametrize("overrides,needle", [
    (["algo=grpo", "methods=[discussion]"], "'discussion', which needs at least 2 agents"),
    (["methods=[]"], "methods=[] evaluates nothing"),
    (["methods=[team,team]"], "names a method twice"),
])
def test_bad_eval_values(tmp_path, overrides, needle):
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        validate(compose_cfg([f"output_dir={tmp_path}", *overrides], "eval"), EvalRunSchema)


def _cli(args: list[str], cwd: Path, module: str = "magrpo.cli.train", timeout: int = 300):
    return preloaded.run(module, args, cwd=cwd, timeout=timeout)


def test_cli_config_error_exits_2_on_stderr_without_traceback(tmp_path):
    """The command as a process, once; the tests below run its main in this process."""
    run_dir = tmp_path / "run"
    needle = "logger.log_every=0 is out of range; it must be >= 1"
    proc = _cli(["logger.log_every=0", f"hydra.run.dir={run_dir}"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert needle in proc.stderr and "config error" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not run_dir.exists()          # no work was done: the refused run leaves no folder behind


def _train_here(args: list[str], capsys) -> tuple[int, str]:
    """`magrpo-train ARGS` run by its main in this process: the exit code and stderr. Spares a
    fresh interpreter per bad value; the test above runs the command as a process."""
    from magrpo.cli.train import main

    capsys.readouterr()
    code = run_cli(main, "magrpo-train", args)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("overrides,needle", [
    (["hardware.device=banana"], "hardware.device='banana'"),
    (["task=tldr", "reward.length_band_low=9"], "reward.length_band_low=9.0"),
    (["task=tldr", "task.data.path=/no/such.jsonl"], "task.data.path='/no/such.jsonl': no such file"),
    (["algo.joint_mode=foo"], "algo.joint_mode='foo' is not allowed; choose one of: aligned, cross"),
])
def test_other_bad_values_exit_2_on_stderr_without_traceback(tmp_path, capsys, overrides, needle):
    run_dir = tmp_path / "run"
    code, err = _train_here([*overrides, f"hydra.run.dir={run_dir}"], capsys)
    assert code == 2, err[-2000:]
    assert needle in err and "config error" in err and "Traceback" not in err
    assert not run_dir.exists()          # no work was done: the refused run leaves no folder behind


@pytest.mark.parametrize("overrides,needle", [
    (["eval.num_samples=0"], "eval.num_samples=0 is out of range; it must be >= 1"),
    (["checkpoint=runs/nope"], "checkpoint='runs/nope': no such checkpoint or run directory"),
    (["team=./teams/nope"], "'teams/nope': no such directory"),
    (["team=teams/nope"], "'teams/nope': no such directory"),   # teams/ is here: a mistyped folder, no hub id
])
def test_eval_config_errors_leave_no_folder_and_a_local_path_is_no_hub_id(tmp_path, monkeypatch, capsys, overrides,
                                                                          needle):
    from magrpo.cli.evaluate import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "teams" / "first").mkdir(parents=True)
    capsys.readouterr()
    code = run_cli(main, "magrpo-eval", overrides)          # into the default outputs/eval/<stamp>
    err = capsys.readouterr().err
    assert code == 2, err[-2000:]
    assert err.strip().splitlines()[-1] == f"magrpo-eval: config error: {needle}" + \
        (" (and not a hub repo id 'owner/name')" if needle.endswith("no such directory") else ""), err
    assert "hub" not in err.replace("not a hub repo id", "") and "Traceback" not in err
    assert list((tmp_path / "outputs" / "eval").iterdir()) == []      # nothing of the refused run is left


@pytest.mark.parametrize("args,line", [
    (["--max_steps=10"], "'--max_steps=10': magrpo-train takes no such option; a key is set as a Hydra override, "
                         "key=value: write max_steps=10 (magrpo-train --help lists the keys)"),
    (["--max-steps", "10", "seed=1", "--algo.num_generations=8"],
     "'--max-steps 10', '--algo.num_generations=8': magrpo-train takes no such option; a key is set as a Hydra "
     "override, key=value: write max_steps=10 algo.num_generations=8 (magrpo-train --help lists the keys)"),
    (["--cfg", "job", "--save_every"], "'--save_every': magrpo-train takes no such option; a key is set as a Hydra "
                                       "override, key=value: write save_every=VALUE (magrpo-train --help lists the keys)"),
])
def test_argparse_style_options_get_one_line_with_the_hydra_form(tmp_path, monkeypatch, capsys, args, line):
    monkeypatch.chdir(tmp_path)
    code, err = _train_here(args, capsys)
    assert code == 2 and err.strip().splitlines() == [f"magrpo-train: config error: {line}"], err
    assert not (tmp_path / "outputs").exists()


def test_hydras_own_options_are_left_to_hydra():
    from magrpo.launch.override_errors import dashed_overrides

    for argv in (["--help"], ["--hydra-help"], ["--cfg", "job"], ["--cfg=job"], ["-m", "seed=0,1"], ["--multirun"],
                 ["--info", "plugins"], ["--config-name", "eval"], ["--he"], ["--resolve", "--cfg", "all"],
                 ["hydra.run.dir=--x"]):
        assert dashed_overrides(argv, "magrpo-train") is None, argv
    assert "write seed=3" in dashed_overrides(["--seed", "3"], "magrpo-eval")


def test_a_repo_id_is_one_slash_with_no_local_folder_of_its_owner(tmp_path, monkeypatch):
    from magrpo.models.hub import is_repo_id

    monkeypatch.chdir(tmp_path)
    (tmp_path / "teams").mkdir()
    assert is_repo_id("owner/name") and is_repo_id("LovelyBuggies/team-1")
    assert not any(map(is_repo_id, ["teams/nope", "./owner/name", "/abs/x", "~/x", "a/b/c", "name", "owner/", "/x"]))


def test_a_refused_config_keeps_a_folder_that_holds_anything_else_and_a_sweeps_record(tmp_path, capsys):
    # Only what the refused attempt wrote is removed: a folder with the user's file stays (with the
    # refusal recorded), and a sweep keeps each refused job's summary for its table.
    run_dir = tmp_path / "mine"
    run_dir.mkdir()
    (run_dir / "notes.txt").write_text("mine")
    code, err = _train_here(["logger.log_every=0", f"hydra.run.dir={run_dir}"], capsys)
    assert code == 2 and (run_dir / "notes.txt").read_text() == "mine"
    assert _summary(run_dir)["phase"] == "config"
    code, err = _train_here(["-m", "logger.log_every=0", f"hydra.sweep.dir={tmp_path / 'sweep'}"], capsys)
    (job,) = [d for d in (tmp_path / "sweep").iterdir() if d.is_dir()]
    assert _summary(job)["status"] == "failed" and _summary(job)["phase"] == "config"


def test_empty_resume_dir_exits_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    code, err = _train_here([f"resume={tmp_path / 'empty'}", f"hydra.run.dir={tmp_path / 'run'}"], capsys)
    assert code == 2 and "Traceback" not in err
    assert "resume=" in err and "neither a checkpoint" in err


# -- setup failures: clear, named, recorded -------------------------------------------------------


def test_unloadable_model_is_a_setup_error_naming_the_model(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code, err = _train_here(["agents.models.0.name_or_path=nobody/no-such-model", *TINY, f"hydra.run.dir={run_dir}"],
                            capsys)
    assert code == 1, err[-2000:]
    assert "setup error" in err and "'nobody/no-such-model'" in err
    assert "agents.models[0]" in err and "Traceback" not in err
    summary = _summary(run_dir)
    assert summary["status"] == "failed" and summary["phase"] == "setup"
    assert "nobody/no-such-model" in summary["reason"]


def test_data_with_wrong_columns_is_a_setup_error(make_cfg, tmp_path):
    data = tmp_path / "posts.jsonl"
    data.write_text("".join(json.dumps({"title": f"t{i}", "body": "b"}) + "\n" for i in range(4)))
    out = tmp_path / "run"
    cfg = make_cfg(["task=tldr", f"task.data.path={data}", "task.data.train_split='train[:2]'",
                    "task.data.eval_split='train[2:]'", *TINY], out=str(out))
    with pytest.raises(SetupError, match="no text column.*title, body"):
        run(cfg)
    summary = _summary(out)
    assert summary["status"] == "failed" and summary["phase"] == "setup" and "text_column" in summary["reason"]


# -- a sweep survives its jobs --------------------------------------------------------------------


def test_sweep_with_one_bad_job_runs_the_others_and_exits_nonzero(tmp_path, capsys):
    """The basic launcher; tests/test_sweeps.py runs a sweep as a process, under joblib."""
    sweep = tmp_path / "sweep"
    code, err = _train_here(["-m", "algo.epsilon=-1,0.2", "debug=smoke", "save_final=false", *TINY,
                             f"hydra.sweep.dir={sweep}"], capsys)
    assert code == 1, err[-3000:]
    assert "1 of 2 job(s) failed" in err and "  0 (algo.epsilon=-1" in err     # job 0, named with its overrides
    assert "algo.epsilon=-1.0 is out of range" in err
    assert "Traceback" not in err
    bad, good = sorted(p.parent for p in sweep.glob("*/summary.json"))
    assert bad.name == "0" and _summary(bad)["status"] == "failed"
    assert "algo.epsilon=-1.0" in _summary(bad)["reason"]
    assert _summary(good)["status"] == "finished" and _summary(good)["steps"] == 2
    # The failed sweep is the last command's news only: the next command in this process succeeds.
    code, err = _train_here(["debug=smoke", "save_final=false", *TINY, f"hydra.run.dir={tmp_path / 'next'}"], capsys)
    assert code == 0, err[-2000:]


# -- distinct run directories ---------------------------------------------------------------------


@pytest.mark.slow      # two fresh interpreters at once, 15 s; a live run's directory is refused in the fast suite
def test_two_runs_started_together_get_their_own_directories(tmp_path):
    # One torch thread each: the two share the machine's cores.
    args = [sys.executable, "-m", "magrpo.cli.train", "debug=smoke", "save_final=false", "hardware.num_threads=1", *TINY]
    procs = [subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()[-2000:]
    runs = sorted((tmp_path / "outputs" / "train").iterdir())
    assert len(runs) == 2
    for r in runs:
        rows = [json.loads(line) for line in (r / "metrics.jsonl").read_text().splitlines()]
        assert [row["step"] for row in rows if "train/reward_mean" in row] == [1, 2]
        assert _summary(r)["process"]["pid"] in {p.pid for p in procs}
    assert len({_summary(r)["process"]["pid"] for r in runs}) == 2


def test_a_directory_owned_by_a_live_run_is_refused(make_cfg, tmp_path):
    out = tmp_path / "run"
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        out.mkdir()
        rec = process_record()
        rec["pid"] = owner.pid
        rec["pid_start"] = None
        (out / CLAIM_FILE).write_text(json.dumps(rec))
        with pytest.raises(ConfigError, match=f"in use by another run \\(pid {owner.pid}"):
            run(make_cfg(["debug=smoke"], out=str(out)))
        assert not (out / "summary.json").exists()       # the other run's record is left alone
    finally:
        owner.kill()
        owner.wait()
    # Its owner gone, the claim is stale and the directory can be used.
    with RunStatus(out) as status:
        status.write({"status": "running"})
        assert json.loads((out / CLAIM_FILE).read_text())["pid"] == os.getpid()
    assert not (out / CLAIM_FILE).exists()


# -- atomic, verified checkpoints -----------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A two-step run with a checkpoint after each step."""
    out = tmp_path_factory.mktemp("trained") / "run"
    run(compose_cfg([f"output_dir={out}", "debug=smoke", "save_every=1", *TINY]))
    return out


def _copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_checkpoint_has_a_manifest_of_every_file(trained):
    ckpt = trained / "checkpoints" / "step_2"
    manifest = checkpoint.verify(ckpt)
    on_disk = {p.relative_to(ckpt).as_posix() for p in ckpt.rglob("*") if p.is_file()} - {checkpoint.MANIFEST}
    assert set(manifest["files"]) == on_disk and manifest["step"] == 2
    assert {"trainer_state.pt", "config.json", "agent_1/model.safetensors"} <= on_disk
    assert not list((trained / "checkpoints").glob(".*"))       # no temporary directory left


@pytest.mark.parametrize("damage", ["truncate", "empty", "flip", "delete", "no_manifest"])
def test_damaged_checkpoint_is_named_skipped_and_never_loaded(trained, tmp_path, make_cfg, damage):
    run_dir = _copy_run(trained, tmp_path / "copy")
    step2 = run_dir / "checkpoints" / "step_2"
    weights = step2 / "agent_1" / "model.safetensors"
    if damage == "truncate":
        os.truncate(weights, weights.stat().st_size // 2)
    elif damage == "empty":
        os.truncate(weights, 0)
    elif damage == "flip":
        data = bytearray(weights.read_bytes())
        data[-1] ^= 0xFF
        weights.write_bytes(bytes(data))
    elif damage == "delete":
        (step2 / "trainer_state.pt").unlink()
    else:
        (step2 / checkpoint.MANIFEST).unlink()
    why = {"truncate": "has .* bytes, the manifest says", "empty": "has 0 bytes", "flip": "sha256",
           "delete": "trainer_state.pt is missing", "no_manifest": "incomplete checkpoint"}[damage]
    with pytest.raises(CheckpointError, match=f"resume='{step2}': .*{why}"):
        checkpoint.resolve(step2, "resume")
    # Given the run directory, the newest complete checkpoint is taken.
    assert checkpoint.resolve(run_dir, "resume") == run_dir / "checkpoints" / "step_1"
    # And the trainer itself refuses to read it.
    from magrpo.training.trainer import Trainer

    trainer = Trainer(validate(make_cfg(["debug=smoke", *TINY], out=str(tmp_path / "t"))), tmp_path / "t")
    with pytest.raises(CheckpointError, match=why):
        trainer.load(step2)
    trainer.logger.close()


def test_resume_from_a_run_dir_skips_the_damaged_checkpoint(trained, tmp_path, make_cfg, caplog):
    run_dir = _copy_run(trained, tmp_path / "copy")
    os.truncate(run_dir / "checkpoints" / "step_2" / "agent_2" / "model.safetensors", 10)
    out = tmp_path / "resumed"
    run(make_cfg(["debug=smoke", "save_every=1", *TINY, f"resume={run_dir}"], out=str(out)))
    assert "skipping" in caplog.text and "step_2" in caplog.text
    summary = _summary(out)
    assert summary["resumed_from"]["checkpoint"].endswith("step_1") and summary["steps"] == 2


def test_a_failed_save_leaves_no_checkpoint(tmp_path):
    def fill(d: Path) -> None:
        (d / "weights.bin").write_bytes(b"x" * 100)
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_checkpoint(tmp_path / "checkpoints" / "step_3", fill, 3, {})
    assert list((tmp_path / "checkpoints").iterdir()) == []


def _assert_stopped_by_a_full_disk(run_dir: Path, code: int, err: str, step: int) -> None:
    where = run_dir / "checkpoints"
    ours = [line for line in err.splitlines() if line.startswith("magrpo-train:")]
    assert code == 1 and "Traceback" not in err, err[-3000:]
    assert len(ours) == 1 and ours[0].startswith(f"magrpo-train: setup error: the disk is full at {where}: "
                                                 f"writing step_{step} failed ("), err[-3000:]
    summary = _summary(run_dir)
    assert (summary["status"], summary["phase"]) == ("failed", "training")
    assert summary["reason"] == ours[0].removeprefix("magrpo-train: setup error: ")
    assert summary["error"] == "DiskFullError"
    assert not where.exists() or list(where.iterdir()) == [], "no checkpoint, no temporary directory"
    with pytest.raises(ConfigError, match="neither a checkpoint|no complete checkpoint"):
        checkpoint.resolve(run_dir, "resume")


@pytest.mark.parametrize("form", ["torch", "oserror"])
def test_a_full_disk_during_a_checkpoint_save_is_one_line_and_recorded(form, tmp_path, monkeypatch, capsys):
    import errno

    import torch
    import transformers.modeling_utils

    if form == "torch":     # torch.save of trainer_state.pt, as it fails on a full disk
        def full(obj, f, *args, **kwargs):
            Path(f).write_bytes(b"PK\x03\x04" + b"\0" * 60)
            try:
                raise RuntimeError("basic_ios::clear: iostream error")
            except RuntimeError:     # chained as torch chains it (__context__)
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")  # noqa: B904

        monkeypatch.setattr(torch, "save", full)
    else:                   # the weights, through save_pretrained's writer
        def full(state_dict, filename, metadata=None):
            Path(filename).write_bytes(b"\0" * 64)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)

        monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full)
    run_dir = tmp_path / "run"
    code, err = _train_here(["debug=smoke", "save_every=1", *TINY, f"hydra.run.dir={run_dir}"], capsys)
    _assert_stopped_by_a_full_disk(run_dir, code, err, step=1)
    why = "torch.save: unexpected pos 576 vs 534" if form == "torch" else "no space left on device"
    assert f"failed ({why}; " in _summary(run_dir)["reason"]


def test_a_really_full_disk_during_a_checkpoint_save(tmp_path, capsys):
    """The run directory on a 640 KiB tmpfs: its records fit, its first checkpoint (two agents of
    about 430 KiB each) does not."""
    with small_tmpfs(tmp_path / "small", "640k") as disk:
        run_dir = disk / "run"
        code, err = _train_here(["debug=smoke", "save_every=1", *TINY, f"hydra.run.dir={run_dir}"], capsys)
        _assert_stopped_by_a_full_disk(run_dir, code, err, step=1)
        assert "(no space left on device; " in _summary(run_dir)["reason"]


def test_an_evaluation_takes_the_newest_complete_checkpoint(trained, tmp_path):
    from magrpo.evaluation.job import resolve_checkpoint

    run_dir = _copy_run(trained, tmp_path / "copy")
    (run_dir / "checkpoints" / "step_2" / "trainer_state.pt").write_bytes(b"")
    assert resolve_checkpoint(run_dir) == run_dir / "checkpoints" / "step_1"
    # A half-written save (a hidden temporary directory) is not a checkpoint.
    (run_dir / "checkpoints" / ".step_9.abc.tmp").mkdir()
    assert resolve_checkpoint(run_dir) == run_dir / "checkpoints" / "step_1"


# -- resume checks the config ---------------------------------------------------------------------


@pytest.mark.parametrize("overrides,needles", [
    (["algo.num_generations=8"], ["algo.num_generations: 4 -> 8"]),
    (["algo.batch_size=4"], ["algo.batch_size: 2 -> 4"]),
    (["task=tldr"], ["task.name: 'length_ratio' -> 'tldr'", "reward.name"]),
    (["algo=grpo"], ["algo.name: 'magrpo' -> 'grpo'"]),
    (["agents=tiny_lora"], ["agents.models[0].lora: None ->", "agents.share_base: False -> True"]),
    (["agents.num_agents=1"], ["agents.num_agents: 2 -> 1"]),
    (["seed=1"], ["seed: 0 -> 1"]),
    (["optimizer.lr=0.1"], ["optimizer.lr"]),
    (["reward.max_ratio=4"], ["reward.max_ratio: 3.0 -> 4.0"]),
])
def test_resume_with_a_changed_config_is_refused_naming_the_keys(trained, make_cfg, overrides, needles):
    with pytest.raises(ConfigError) as e:
        validate(make_cfg(["debug=smoke", *TINY, "max_steps=4", f"resume={trained}", *overrides]))
    for needle in [*needles, "may change only", "max_steps"]:
        assert needle in str(e.value), f"{needle!r} missing from: {e.value}"


def test_resume_may_change_length_logging_eval_and_hardware(trained, make_cfg):
    cfg = validate(make_cfg(["debug=smoke", *TINY, f"resume={trained}", "max_steps=5", "logger.log_every=2",
                             "eval.every=1", "eval.num_samples=4", "save_every=3", "hardware.num_threads=2"]))
    assert cfg.resume == str(trained / "checkpoints" / "step_2")
    with pytest.raises(ConfigError, match="max_steps=2: the checkpoint .* is already at step 2"):
        validate(make_cfg(["debug=smoke", *TINY, f"resume={trained}"]))


def test_evaluating_a_checkpoint_with_other_agents_is_refused(trained, tmp_path):
    cfg = compose_cfg([f"output_dir={tmp_path}", f"checkpoint={trained}", "agents=tiny_lora"], "eval")
    with pytest.raises(ConfigError, match="agents.share_base: False -> True"):
        validate(cfg, EvalRunSchema)


# -- honest status --------------------------------------------------------------------------------


def test_status_of_a_dead_or_silent_run_is_interrupted():
    live = {"status": "running", "process": {**process_record(), "heartbeat_at": time.time()}}
    assert effective_status(live) == "running"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone = {"status": "running", "process": {**process_record(), "pid": dead.pid, "pid_start": None}}
    assert effective_status(gone) == "interrupted"
    elsewhere = {"host": "another-host", "pid": 1, "heartbeat_at": time.time()}
    assert effective_status({"status": "running", "process": elsewhere}) == "running"
    assert effective_status({"status": "running", "process": elsewhere}, now=time.time() + 3600) == "interrupted"
    assert effective_status({"status": "finished", "process": gone["process"]}) == "finished"


def test_heartbeat_refreshes_a_running_summary(tmp_path, monkeypatch):
    from magrpo.core import tracking

    monkeypatch.setattr(tracking, "HEARTBEAT_S", 0.05)
    with RunStatus(tmp_path / "run") as status:
        status.write({"status": "running"})
        first = _summary(tmp_path / "run")["process"]["heartbeat_at"]
        deadline = time.monotonic() + 30        # polled, not slept: a loaded machine may be slow to beat
        while _summary(tmp_path / "run")["process"]["heartbeat_at"] == first and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _summary(tmp_path / "run")["process"]["heartbeat_at"] > first


def test_a_crash_while_training_is_recorded_with_its_reason(make_cfg, tmp_path, monkeypatch):
    import magrpo.training.trainer

    def broken(*args, **kwargs):
        raise RuntimeError("boom in step 1")

    monkeypatch.setattr(magrpo.training.trainer, "batch_for_step", broken)
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="boom"):
        run(make_cfg(["debug=smoke", *TINY], out=str(out)))
    summary = _summary(out)
    assert (summary["status"], summary["phase"], summary["reason"]) == ("failed", "training", "boom in step 1")
    assert "batch_for_step" in summary["traceback"] and summary["initial_eval"] is not None
    assert read_status(out)[0] == "failed" and not (out / CLAIM_FILE).exists()


def test_sigkilled_run_reads_as_interrupted_in_table_and_on_resume(tmp_path, make_cfg, capsys):
    from magrpo import table

    run_dir = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "magrpo.cli.train", "debug=smoke", "max_steps=500", "save_every=1",
                             *TINY, f"hydra.run.dir={run_dir}"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 240
        while not (run_dir / "checkpoints" / "step_1").exists():
            assert proc.poll() is None and time.time() < deadline, "the run ended before its first checkpoint"
            time.sleep(0.2)
        assert read_status(run_dir)[0] == "running"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert _summary(run_dir)["status"] == "running"          # what the killed process last wrote
    assert read_status(run_dir)[0] == "interrupted"
    assert table.main([str(tmp_path), "--out", str(tmp_path / "table")]) == 2
    assert f"skipping {run_dir}: status 'interrupted'" in capsys.readouterr().err
    # Resuming names the interrupted run.
    out = tmp_path / "resumed"
    step = max(s for s, _ in checkpoint.step_dirs(run_dir / "checkpoints"))
    run(make_cfg(["debug=smoke", "save_every=1", *TINY, f"max_steps={step + 1}", f"resume={run_dir}"], out=str(out)))
    assert _summary(out)["resumed_from"]["run_status"] == "interrupted"
    assert _summary(out)["status"] == "finished"


# -- the installed package ------------------------------------------------------------------------


@pytest.mark.slow      # an installation check, as the fresh-clone set-up is (`make test-slow`)
def test_installed_wheel_trains_from_any_directory(tmp_path):
    src = tmp_path / "src"
    for name in ["magrpo", "conf", "pyproject.toml", "setup.py", "MANIFEST.in", "README.md"]:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copy
        copy(ROOT / name, src / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                         if (ROOT / name).is_dir() else {}))
    pip = [sys.executable, "-m", "pip", "-q"]
    subprocess.run([*pip, "wheel", str(src), "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist")],
                   check=True, capture_output=True, timeout=300)
    wheel = next((tmp_path / "dist").glob("magrpo-*.whl"))
    target = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True,
                   capture_output=True, timeout=300)
    assert (target / "magrpo" / "conf" / "train.yaml").is_file()
    assert (target / "magrpo" / "tasks" / "writing" / "lexicon.json").is_file()
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(target)}
    # Where magrpo.cli.train would load from and the conf/ it reads (train.CONF_DIR is conf_dir()), found
    # without importing torch: the run below pays for that once.
    code = ("import importlib.util as u; from magrpo.launch import conf_dir; "
            "print(u.find_spec('magrpo.cli.train').origin); print(conf_dir())")
    where = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True,
                           check=True).stdout.split()
    assert where == [str(target / "magrpo" / "train.py"), str(target / "magrpo" / "conf")]
    proc = subprocess.run([str(target / "bin" / "magrpo-train"), "debug=smoke", *TINY], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (summary,) = (work / "outputs" / "train").glob("*/summary.json")
    assert json.loads(summary.read_text())["status"] == "finished"
