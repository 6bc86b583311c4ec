"""Data-parallel training on torch.distributed (gloo on CPU): K ranks compute the update of one
process on the whole batch; a torchrun job writes one run directory, resumes, and stops as a whole
when one rank fails."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from magrpo.algos.magrpo import MAGRPO
from magrpo.core.schema import ConfigError
from magrpo.models import distributed
from magrpo.models.agents import load_agents
from magrpo.rollout.record import Generation, Sampling, generate
from magrpo.tasks import build_task
from magrpo.validation.checks import validate
from tests.conftest import compose_cfg

ROOT = Path(__file__).resolve().parent.parent
ITEMS, G = 4, 3
OVERRIDES = ["algo.micro_batch_size=4", "optimizer.max_grad_norm=1e9", "algo.max_new_tokens=10"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fixed_update(out: str, overrides: list[str], rank: int, world_size: int):
    """One MAGRPO update of agent 1 on this rank's items of a fixed batch; its gradients and metrics."""
    cfg = validate(compose_cfg([f"output_dir={out}", *OVERRIDES, *overrides]))
    torch.manual_seed(0)
    agents = load_agents(cfg.agents, cfg.hardware, 1, need_reference=cfg.algo.beta > 0)
    if world_size > 1 and cfg.hardware.strategy == "fsdp":
        distributed.shard_model(agents[0].model)
    algo = MAGRPO(cfg, agents, build_task(cfg.task, cfg.reward))
    gen = generate(agents[0], [f"explain topic {i} " * (i + 1) for i in range(ITEMS)],
                   Sampling(G, 10, share_prompt=False))             # left-padded prompts, the same in every process
    adv = torch.linspace(-1.0, 1.0, ITEMS * G)
    k = ITEMS // world_size
    items, rows = slice(rank * k, (rank + 1) * k), slice(rank * k * G, (rank + 1) * k * G)
    mine = Generation(gen.prompt_ids[items], gen.prompt_mask[items], gen.completion_ids[rows],
                      gen.completion_mask[rows], gen.texts[rows], G, 0.0)
    metrics = algo._update(0, mine, adv[rows])
    grads = {n: (p.grad.full_tensor() if distributed._is_sharded(p) else p.grad).clone()
             for n, p in agents[0].model.named_parameters() if p.grad is not None}
    return grads, metrics


def _rank_main(rank: int, world_size: int, port: int, out: str, cases: dict[str, list[str]]) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    cfg = validate(compose_cfg([f"output_dir={out}"]))
    distributed.init(cfg.hardware)
    try:
        for name, overrides in cases.items():
            grads, metrics = _fixed_update(out, overrides, rank, world_size)
            torch.save({"grads": grads, "metrics": metrics}, Path(out) / f"{name}_rank{rank}.pt")
    except BaseException:
        distributed.shutdown()
        raise
    # Both ranks done before either closes its connections: gloo once aborted rank 0 (SIGABRT,
    # "terminate called without an active exception") when its peer tore down first.
    torch.distributed.barrier()
    distributed.shutdown()


# Each strategy with a loss aggregation whose normaliser spans the ranks' items.
CASES = {strategy: [f"algo.loss_agg={agg}", "algo.loss=clip", "algo.num_iterations=2", "algo.beta=0.05", f"hardware.strategy={strategy}"]
         for agg, strategy in [("token_mean", "ddp"), ("seq_mean_token_mean", "fsdp")]}


@pytest.mark.slow      # 18 s: two torchrun ranks; the fast suite checks the batch split and the shards in-process
def test_two_ranks_compute_the_gradient_of_one_process_on_the_whole_batch(tmp_path):
    # One pair of rank processes runs every case: starting them costs more than the updates.
    mp.spawn(_rank_main, args=(2, _free_port(), str(tmp_path), CASES), nprocs=2, join=True)
    for name, overrides in CASES.items():
        want, want_metrics = _fixed_update(str(tmp_path), overrides, 0, 1)
        for rank in range(2):
            got = torch.load(tmp_path / f"{name}_rank{rank}.pt")
            assert got["grads"].keys() == want.keys(), name
            for param in want:
                torch.testing.assert_close(got["grads"][param], want[param], atol=1e-5, rtol=0, msg=f"{name} {param}")
            for key in ("loss", "policy_loss", "kl", "entropy", "clip_frac", "grad_norm"):
                assert got["metrics"][key] == pytest.approx(want_metrics[key], abs=1e-5), (name, key)


# --- torchrun jobs ---------------------------------------------------------------------------------


def _torchrun(args: list[str], cwd: Path, timeout: int = 240, script: str | None = None):
    entry = [script] if script else ["-m", "magrpo.cli.train"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *entry, *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled",
           "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


# Rank 1 raises in its second optimizer step of the job.
FAILING_RANK = """
import sys
from magrpo.algos.magrpo import MAGRPO
from magrpo.models.distributed import world
from magrpo.cli.train import main

step = MAGRPO.step
calls = []

def failing_step(self, items):
    calls.append(1)
    if world().rank == 1 and len(calls) == 2:
        raise RuntimeError("injected failure on rank 1")
    return step(self, items)

MAGRPO.step = failing_step
sys.argv[0] = "magrpo-train"
main()
"""


def _train_steps(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            if "train/reward_mean" in line]


# Two torchrun launches of two ranks each: the longest check of the suite (~26 s on 2 cores, both
# cores busy), so `make test-slow` runs it; `make test` keeps the two-rank gradient check above.
@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_rank_run_writes_one_run_directory_resumes_and_stops_as_a_whole(tmp_path, strategy):
    """A two-step job, then a job resumed from its checkpoint whose rank 1 raises in its second step
    (each torchrun launch costs more than its steps, so the resume and the failure share one)."""
    run = tmp_path / "run"
    common = ["debug=smoke", f"hardware.strategy={strategy}", "algo.max_new_tokens=8", f"hydra.run.dir={run}"]
    proc = _torchrun([*common, f"output_dir={run}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert [p.relative_to(tmp_path) for p in tmp_path.rglob("metrics.jsonl")] == [Path("run/metrics.jsonl")]
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step_2"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["world_size"] == 2 and summary["steps"] == 2
    assert _train_steps(run) == [1, 2]
    # One copy of every log line, from rank 0: another rank prints only its own warnings, prefixed.
    console = (proc.stdout + proc.stderr).splitlines()
    assert sum("finished: 2 steps" in line for line in console) == 1, console[-20:]
    assert sum("eval @ step 2" in line for line in console) == 1
    assert all(line.startswith("[rank 1]") for line in console if "rank 1" in line and "[rank" in line)

    # Resumed at step 2: step 3 runs on both ranks, then rank 1 fails and the whole job stops.
    script = tmp_path / "failing_rank.py"
    script.write_text(textwrap.dedent(FAILING_RANK))
    resumed = tmp_path / "resumed"
    proc = _torchrun([*common[:3], "max_steps=4", f"hydra.run.dir={resumed}", f"output_dir={resumed}",
                      f"resume={run / 'checkpoints' / 'step_2'}"], tmp_path, script=str(script))
    assert proc.returncode != 0
    report = (proc.stdout + proc.stderr).split("Root Cause")[-1]      # torchrun's report of the first failure
    assert "rank      : 1" in report and "RuntimeError: injected failure on rank 1" in report
    summary = json.loads((resumed / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["world_size"] == 2
    assert summary["steps"] == 3 and summary["resumed_from"]["step"] == 2
    assert _train_steps(resumed) == [3]

    # the checkpoint of 2 ranks does not resume in one process
    cfg = compose_cfg([*common[:3], "max_steps=3", f"output_dir={tmp_path / 'one'}",
                       f"resume={run / 'checkpoints' / 'step_2'}"])
    from magrpo.cli.train import run as train_run

    with pytest.raises(ConfigError, match="saved by 2 rank"):
        train_run(cfg)


def test_batch_size_must_split_over_the_ranks(make_cfg, monkeypatch):
    from magrpo.training.trainer import Trainer

    cfg = validate(make_cfg(["algo.batch_size=3"]))
    monkeypatch.setattr(distributed, "init", lambda hw: distributed.World(rank=0, size=2))
    with pytest.raises(ConfigError, match=r"algo.batch_size=3 does not split over 2 ranks"):
        Trainer(cfg, Path(cfg.output_dir))


def test_shards_cover_the_items_in_rank_order(monkeypatch):
    for size in (1, 2, 3):
        blocks = []
        for rank in range(size):
            monkeypatch.setattr(distributed, "_WORLD", distributed.World(rank=rank, size=size))
            blocks.append(list(range(7))[distributed.shard(7)])
        assert [i for b in blocks for i in b] == list(range(7))
        assert max(map(len, blocks)) - min(map(len, blocks)) <= 1
