"""The training loop around an algorithm: data order, evaluation, logging, checkpoints, resume.

The algorithm (magrpo.algos) owns one step's math; this loop owns everything that repeats.
Batches are a pure function of (seed, step), so a resumed run draws exactly the batches an
uninterrupted run would. Under torchrun each rank trains on its block of every batch
(magrpo/models/distributed.py); rank 0 alone writes the run directory.
"""

from __future__ import annotations

import logging
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from magrpo.algos import ALGOS
from magrpo.algos.base import StepInput, StepSpecs
from magrpo.algos.diversity import Diversity
from magrpo.algos.keys import reward_kind
from magrpo.algos.optim import agent_overrides
from magrpo.config.run import RunConfig
from magrpo.config.schemas import optimized_metric
from magrpo.core import checkpoint, trust
from magrpo.core.checkpoint import STATE_FILE
from magrpo.core.instances import as_data
from magrpo.core.schema import ConfigError, did_you_mean
from magrpo.core.tracking import RunLogger, read_status, run_identity
from magrpo.core.writes import disk_full_is_one_line
from magrpo.evaluation.collaboration import CollaborationConfig
from magrpo.evaluation.loop import eval_sampling, evaluate, metric_names
from magrpo.models import distributed, flops
from magrpo.models.agents import (
    Agent,
    cuda_memory_metrics,
    load_agent_weights,
    load_agents,
    policy_agents,
    save_agent,
    seed_everything,
    team_level,
)
from magrpo.tasks import Task, build_task
from magrpo.tasks.reward_fns import ZERO_SPREAD_STEPS, ZeroSpread, check_splits
from magrpo.tasks.symmetry import other_play, with_views
from magrpo.team.partners import PartnerPool, load_members

log = logging.getLogger(__name__)


def batch_for_step(num_items: int, batch_size: int, step: int, seed: int) -> list[int]:
    """Item indices of `step`: consecutive slices of per-epoch permutations seeded by (seed, epoch)."""
    out: list[int] = []
    pos = step * batch_size
    while len(out) < batch_size:
        epoch, offset = divmod(pos, num_items)
        perm = torch.randperm(num_items, generator=torch.Generator().manual_seed(seed * 100_003 + epoch))
        take = min(batch_size - len(out), num_items - offset)
        out += perm[offset:offset + take].tolist()
        pos += take
    return out


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.random.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.random.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class _QuietLogger:
    """The logger of ranks other than 0: they compute metrics but write nothing."""

    def log(self, *args, **kwargs) -> None: ...
    def log_examples(self, *args, **kwargs) -> None: ...
    def summary(self, *args, **kwargs) -> None: ...
    def close(self, exit_code: int = 0) -> None: ...


class Progress:
    """Console progress where no progress bar is drawn (no TTY: a batch job, a pipe, a log file):
    one line per `logger.log_every` steps with the reward, the loss, the elapsed time and an ETA."""

    def __init__(self, first_step: int, max_steps: int):
        self.first, self.max_steps, self.started = first_step, max_steps, time.time()

    def line(self, step: int, metrics: dict[str, float]) -> str:
        elapsed = time.time() - self.started
        eta = elapsed / max(step - self.first, 1) * (self.max_steps - step)
        losses = [v for k, v in metrics.items() if k.endswith("/loss") and k.startswith("train/")]
        loss = f" loss {sum(losses) / len(losses):.4f}" if losses else ""
        return (f"step {step}/{self.max_steps} reward {metrics.get('train/reward_mean', float('nan')):.4f}{loss} "
                f"elapsed {_clock(elapsed)} eta {_clock(eta)}")


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def diversity_of(cfg: RunConfig, agents: list[Agent], temperature: float) -> Diversity:
    """The earlier members `cfg.diversity` names, each of whose agents must read this team's token
    ids as this team's agent of its role does (the same tokenizer)."""
    members = load_members(list(cfg.diversity), len(agents), cfg.task.name, str(agents[0].device), "diversity")
    for member in members:
        for k, (theirs, ours) in enumerate(zip(member.agents, agents)):
            if theirs.tokenizer.get_vocab() != ours.tokenizer.get_vocab():
                raise ConfigError(f"diversity: {member.label}: agent {k + 1}'s tokenizer is not this run's agent "
                                  f"{k + 1}'s; the term scores this team's token ids with the member's model, so "
                                  f"they must share one tokenizer")
    log.info("diversity: %d earlier member(s) loaded and frozen (diversity_coef=%g)", len(members), cfg.diversity_coef)
    return Diversity(float(cfg.diversity_coef), [m.agents for m in members], temperature)


class Trainer:
    def __init__(self, cfg: RunConfig, run_dir: Path, status_before: str = "missing", from_run: dict | None = None):
        """`status_before`: the status run_dir's summary.json had before this run claimed it (what a
        run resumed in place reports as the status of the run it continues). `from_run`: what
        `resume=RUN` took from the run's saved overrides (magrpo.launch.run_config), for summary.json."""
        hw = cfg.hardware
        self.world = distributed.init(hw)
        run_dir = self._shared_run_dir(run_dir)
        self.cfg, self.run_dir = cfg, run_dir
        if cfg.algo.batch_size % self.world.size:
            raise ConfigError(f"algo.batch_size={cfg.algo.batch_size} does not split over {self.world.size} ranks "
                              f"(torchrun --nnodes x --nproc_per_node); choose a multiple of {self.world.size}")
        if hw.num_threads:
            torch.set_num_threads(hw.num_threads)
        if hw.deterministic:
            torch.use_deterministic_algorithms(True, warn_only=True)
        seed_everything(cfg.seed)
        self.task: Task = build_task(cfg.task, cfg.reward, cfg.sandbox)
        if cfg.algo.other_play:      # agents 2..N see training items under random relabellings
            self.task = other_play(self.task)
        self.task_info = self.task.run_info()   # e.g. the sandbox level that will run the code
        self.train_items = self.task.load("train")
        eval_items = self.task.load("eval")
        self.eval_items = eval_items[:cfg.eval.num_items] if cfg.eval.num_items else eval_items
        if not self.train_items:
            raise ValueError(f"task {cfg.task.name!r} has no training items")
        algo_cls = ALGOS[cfg.algo.name]
        team = algo_cls.team(cfg)
        self.status_before = status_before
        self.check_metrics(team.num_agents)     # before any model is loaded
        if self.task.reward_fns is not None and reward_kind(cfg.algo) == "individual":
            check_splits(self.task, self.eval_items[0], team.num_agents)   # per-agent shares, before any model
        self.agents: list[Agent] = load_agents(cfg.agents, hw, team.num_agents, need_reference=team.reference)
        self.policies = policy_agents(self.agents)   # what saves and loads: one per policy
        if cfg.resume:        # weights first: a sharded model (fsdp) loads only gathered weights
            checkpoint.verify(Path(cfg.resume).expanduser())   # every file whole, before any is read
            self._verified = Path(cfg.resume).expanduser()
            for policy in self.policies:
                load_agent_weights(policy, Path(cfg.resume).expanduser() / policy.policy_name)
        self.sharded = self.world.distributed and hw.strategy == "fsdp"
        if self.world.distributed:
            models = {id(m): m for a in self.agents for m in (a.model, a.reference) if m is not None}
            for model in models.values():
                distributed.broadcast_module(model)        # every rank starts from rank 0's weights
                if self.sharded:
                    distributed.shard_model(model)
        # How a step samples, grows its turns and shows feedback: built once, for the algorithm's
        # training and this loop's evaluation (which follows the training turns).
        self.specs = StepSpecs.of(cfg, self.task)
        self.algo = algo_cls(cfg, self.agents, self.task, self.specs)   # its optimizers hold the (sharded) parameters
        # Frozen partners (magrpo.team.partners): loaded once, before the first step.
        self.partners = PartnerPool(list(cfg.partners), cfg.partner_roles, cfg.partner_sampling, team.num_agents,
                                    cfg.task.name, str(self.agents[0].device), cfg.seed) if cfg.partners else None
        # The population's diversity term (magrpo.algos.diversity): earlier members, loaded once, frozen.
        self.diversity = diversity_of(cfg, self.agents, self.specs.sampling.temperature) if cfg.diversity else None
        if self.world.distributed:      # every rank samples its own completions: a random stream per rank
            seed_everything(cfg.seed + 1_000_003 * self.world.rank)
        self.logger = RunLogger(cfg, run_dir, self.identity()) if self.world.is_main else _QuietLogger()
        self.step = 0
        self.initial_eval: dict[str, float] | None = None
        self.best: dict[str, Any] | None = None
        self.evals: list[dict[str, Any]] = []
        self.started = time.time()
        self.elapsed_before = 0.0   # wall seconds spent before a resume
        self.flops_total = 0.0      # training FLOPs counted so far, every rank's (magrpo.models.flops)
        self.resumed_from: dict[str, Any] | None = None
        self.from_run = from_run
        self._base_agents: list[Agent] | None = None

    def base_agents(self) -> list[Agent]:
        """Fresh copies of the untrained models (`eval.ablation=base` for agents with neither an
        adapter nor a reference), loaded at the first diagnostics and kept for the later ones."""
        if self._base_agents is None:
            self._base_agents = load_agents(self.cfg.agents, self.cfg.hardware, len(self.agents), need_reference=False)
        return self._base_agents

    def refill(self, round_: int, n: int) -> list[dict]:
        """Round `round_` (1, 2, ...) of extra items for the current step: a batch drawn from the
        training set with its own seed, this rank's block of it (at most `n` items)."""
        cfg = self.cfg
        idx = batch_for_step(len(self.train_items), cfg.algo.batch_size, self.step, cfg.seed + 7919 * round_)
        return self.views([self.train_items[i] for i in idx[distributed.shard(len(idx))]][:n], round_)

    def step_input(self, items: list[dict], seat: dict[int, Agent] | None = None) -> StepInput:
        """What the algorithm gets for the current step: the items as each agent sees them, the
        partners `seat` places (who fills the partner roles this step), more items for dynamic
        sampling, and the diversity term."""
        return StepInput(self.views(items), seat or {}, self.refill, self.diversity)

    def views(self, items: list[dict], round_: int = 0) -> list[dict]:
        """The training items as each agent sees them: under `algo.other_play`, copies that carry a
        fresh random relabelling per partner (magrpo.tasks.symmetry), drawn from the run's seed, the
        step, the round and the rank (a resumed run draws the same ones); else the items."""
        if not self.cfg.algo.other_play:
            return items
        rng = random.Random(f"other_play/{self.cfg.seed}/{self.step}/{round_}/{self.world.rank}")
        return with_views(items, self.task.symmetries(), len(self.agents), rng)

    def _shared_run_dir(self, run_dir: Path) -> Path:
        """Rank 0's run directory on every rank. Hydra timestamps each process's directory, so a rank
        that started a second later made its own (empty) one, which is removed again."""
        shared = Path(distributed.broadcast_object(str(run_dir)))
        if shared != run_dir and run_dir.is_dir() and not any(run_dir.iterdir()):
            run_dir.rmdir()
        return shared

    # -- evaluation -----------------------------------------------------------------------------
    def check_metrics(self, num_agents: int) -> None:
        """The metric a sweeper optimises (`optimized_metric`, else the task's primary metric) must
        be one this run's evaluation reports: refused now, not after training."""
        cfg = self.cfg
        name = optimized_metric(cfg, self.task.primary_metric)
        if self.task.reward_note and self.world.is_main:
            log.warning(self.task.reward_note)
        if not self.eval_items:
            raise ConfigError(f"eval.num_items / task {cfg.task.name!r}: the eval split has no items to evaluate")
        names = metric_names(self.task, self.eval_items[0], cfg.eval.num_samples, num_agents, cfg.algo.num_turns)
        if name not in names:
            key = "optimized_metric" if cfg.optimized_metric else f"task {cfg.task.name!r}'s primary metric"
            raise ConfigError(f"{key}={name!r} is not a metric this run's evaluation reports "
                              f"(eval.num_samples={cfg.eval.num_samples}, algo.num_turns={cfg.algo.num_turns}); "
                              f"it reports: {', '.join(names)}{did_you_mean(name, names)}")

    def run_eval(self) -> dict[str, float]:
        cfg = self.cfg
        metrics, examples = evaluate(self.agents, self.task, self.eval_items, eval_sampling(cfg), cfg.eval.batch_size,
                                     seed=cfg.seed + 7919, num_examples=cfg.eval.log_completions,
                                     turns=self.specs.turns, feedback=self.specs.feedback,
                                     diagnostics=CollaborationConfig.from_eval(cfg.eval, self.base_agents))
        self.logger.log(self.step, {f"eval/{k}": v for k, v in metrics.items()})
        self.logger.log_examples(self.step, "eval/samples", examples)
        primary = metrics.get(self.task.primary_metric, metrics["reward_mean"])
        if self.best is None or primary > self.best["value"]:
            self.best = {"metric": self.task.primary_metric, "value": primary, "step": self.step}
        self.evals.append({"step": self.step, "reward_mean": metrics["reward_mean"]})
        log.info("eval @ step %d: reward_mean=%.4f %s", self.step, metrics["reward_mean"],
                 " ".join(f"{k}={v:.3f}" for k, v in metrics.items() if k.startswith(("pass@", "rouge", "codebleu"))))
        return metrics

    # -- checkpoints ----------------------------------------------------------------------------
    def save(self) -> Path:
        """Atomically (magrpo.core.checkpoint): a crash mid-save leaves no half checkpoint behind. Rank 0
        writes the weights (gathered when sharded) and the state; under fsdp every rank's optimizer
        shard is staged next to the checkpoint and moved in before it is sealed."""
        config = as_data(self.cfg)
        dest = self.run_dir / "checkpoints" / f"step_{self.step}"
        rng_ranks = distributed.gather_objects(rng_state())     # each rank's random stream resumes
        weights = [distributed.full_state_dict(a.model) for a in self.policies]   # gathered when sharded
        shard_name = f"algo_rank{self.world.rank}.pt"
        if self.sharded:      # each rank keeps its shard of the optimizer state

            with disk_full_is_one_line(dest.parent, f"{dest.name}'s optimizer shard {shard_name}"):
                dest.parent.mkdir(parents=True, exist_ok=True)
                torch.save(self.algo.state_dict(), dest.parent / f".{dest.name}.{shard_name}")
        distributed.barrier()

        def fill(out: Path) -> None:
            for policy, state in zip(self.policies, weights):
                save_agent(policy, out / policy.policy_name, state)
            if self.sharded:
                for rank in range(self.world.size):
                    name = f"algo_rank{rank}.pt"
                    os.replace(dest.parent / f".{dest.name}.{name}", out / name)
            torch.save({"step": self.step, "algo": None if self.sharded else self.algo.state_dict(),
                        "rng": rng_ranks[0], "rng_ranks": rng_ranks, "world_size": self.world.size,
                        "initial_eval": self.initial_eval, "best": self.best, "evals": self.evals,
                        "elapsed": self.elapsed(), "flops": self.flops_total,
                        "config": checkpoint.json_data(config)}, out / STATE_FILE)

        if self.world.is_main:
            # your run's signature covers it before it is in place (a run stopped at any moment is whole)
            checkpoint.write_checkpoint(dest, fill, self.step, config,
                                        seal=lambda tmp: trust.sign_checkpoint(self.run_dir, dest, tmp / checkpoint.MANIFEST))
            log.info("saved checkpoint %s", dest)
        distributed.barrier()
        return dest

    def load(self, path: Path) -> None:
        """Everything but the agents' weights, which __init__ loaded (before any sharding) from the
        same verified checkpoint."""
        if path != getattr(self, "_verified", None):
            checkpoint.verify(path)   # every file whole, before any is read
        state = checkpoint.load_state(path)      # data only (weights_only): a shared checkpoint runs no code
        saved_world = state.get("world_size", 1)
        if saved_world != self.world.size:
            raise ConfigError(f"resume={str(path)!r} was saved by {saved_world} rank(s); resume it with the same "
                              f"number (torchrun --nproc_per_node x --nnodes = {saved_world}), not {self.world.size}")
        if state["algo"] is None:     # saved sharded (fsdp): this rank's shard of the optimizer state
            shard_file = path / f"algo_rank{self.world.rank}.pt"
            if not shard_file.exists():
                raise ConfigError(f"resume={str(path)!r} was saved with hardware.strategy=fsdp; resume it with fsdp")
            self.algo.load_state_dict(checkpoint.load_state(path, shard_file.name))
        elif self.sharded:
            raise ConfigError(f"resume={str(path)!r} was saved with hardware.strategy=ddp; resume it with ddp")
        else:
            self.algo.load_state_dict(state["algo"])
        set_rng_state(state["rng_ranks"][self.world.rank] if "rng_ranks" in state else state["rng"])
        self.step, self.initial_eval, self.best = state["step"], state["initial_eval"], state["best"]
        self.evals, self.elapsed_before = state.get("evals", []), state.get("elapsed", 0.0)
        self.flops_total = state.get("flops", 0.0)      # a checkpoint saved before the count: from here
        # The run that wrote it, if its directory is the usual <run>/checkpoints/step_N; resumed in
        # place, that run's summary.json is this run's now, so its status is the one read before.
        origin = Path(path).parent.parent
        same = origin.resolve() == self.run_dir.resolve()
        status = self.status_before if same else read_status(origin)[0]
        self.resumed_from = {"checkpoint": str(path), "step": self.step, "run_status": status}
        log.info("resumed from %s at step %d (that run's status: %s)", path, self.step, status)

    def elapsed(self) -> float:
        return self.elapsed_before + time.time() - self.started

    # -- summary --------------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        """The run's identity (magrpo.core.tracking.run_identity), its team's size the algorithm's."""
        return run_identity(self.cfg, ALGOS[self.cfg.algo.name].team(self.cfg).num_agents)

    def key_config(self) -> dict[str, Any]:
        """The choices a table groups runs by: the run's identity, then every algo key (flat)."""
        cfg = self.cfg
        out = {**self.identity(), "num_agents": len(self.agents), "num_policies": len(self.policies),
               "team": team_level(cfg.agents) if len(self.agents) > 1 else "single", "lr": cfg.optimizer.lr,
               "max_steps": cfg.max_steps}
        if own := agent_overrides(cfg):     # per-agent settings (agents.models.K.optimizer) that differ
            out["agent_settings"] = own
        for key, value in as_data(cfg.algo).items():
            out.setdefault(key, value)
        return out

    def write_summary(self, status: str, final_eval: dict[str, float] | None = None) -> None:
        self.logger.summary({
            "status": status,
            "initial_eval": self.initial_eval,
            "final_eval": final_eval,
            "best": self.best,
            "steps": self.step,
            "world_size": self.world.size,
            "wall_seconds": self.elapsed(),
            "train_flops": self.flops_total,
            "evals": self.evals,
            "resumed_from": self.resumed_from,
            "from_run": self.from_run,
            "config": self.key_config(),
            **self.task_info,
        })

    # -- the loop -------------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        cfg = self.cfg
        if cfg.resume:
            self.load(Path(cfg.resume).expanduser())
        exit_code = 1   # until the run finishes: a raised error marks the W&B run failed
        try:
            if self.initial_eval is None:
                self.initial_eval = self.run_eval()
                self.write_summary("running")
            bar = tqdm(range(self.step, cfg.max_steps), initial=self.step, total=cfg.max_steps,
                       desc=f"{cfg.algo.name}:{cfg.task.name}", dynamic_ncols=True,
                       disable=None if self.world.is_main else True)
            progress = Progress(self.step, cfg.max_steps) if self.world.is_main and bar.disable else None
            spread = ZeroSpread(self.task, len(self.agents), min(ZERO_SPREAD_STEPS, cfg.max_steps - self.step))
            for _ in bar:
                idx = batch_for_step(len(self.train_items), cfg.algo.batch_size, self.step, cfg.seed)
                idx = idx[distributed.shard(len(idx))]                  # this rank's block of the batch
                seat, seated = self.partners.seat(self.step) if self.partners is not None else ({}, {})
                with flops.counting() as counted:
                    metrics = {**self.algo.step(self.step_input([self.train_items[i] for i in idx], seat)), **seated}
                metrics = distributed.mean_metrics({**metrics, **cuda_memory_metrics(self.agents)})
                (step_flops,) = distributed.sum_floats(counted.flops)      # every rank's passes: a sum
                self.flops_total += step_flops
                metrics.update({"train/flops": step_flops, "train/flops_total": self.flops_total})
                self.step += 1
                if (notice := spread.see(metrics)) and self.world.is_main:
                    log.warning(notice)                 # a reward that teaches nothing, said once
                if self.step % cfg.logger.log_every == 0 or self.step == cfg.max_steps:
                    self.logger.log(self.step, metrics)
                bar.set_postfix(reward=f"{metrics['train/reward_mean']:.3f}", step_s=f"{metrics['time/step_s']:.2f}")
                if progress is not None and (self.step % cfg.logger.log_every == 0 or self.step == cfg.max_steps):
                    log.info(progress.line(self.step, metrics))
                if cfg.eval.every and self.step % cfg.eval.every == 0 and self.step < cfg.max_steps:
                    self.run_eval()
                    self.write_summary("running")
                if cfg.save_every and self.step % cfg.save_every == 0 and self.step < cfg.max_steps:
                    self.save()
            final_eval = self.run_eval()
            if cfg.save_final:
                self.save()
            self.write_summary("finished", final_eval)
            exit_code = 0
            return {"initial_eval": self.initial_eval, "final_eval": final_eval, "steps": self.step,
                    "wall_seconds": self.elapsed(), "primary_metric": self.task.primary_metric}
        except BaseException:
            self.write_summary("failed")
            raise
        finally:
            self.logger.close(exit_code)


def shutdown() -> None:
    """The end of a finished run's process group under torchrun (a failed rank raises instead, and
    torchrun stops every other rank); nothing without it."""
    distributed.shutdown()
