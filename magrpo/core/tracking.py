"""Where metrics go: `metrics.jsonl` and `summary.json` always, W&B when `logger=wandb`; and
the run's status as others read it.

metrics.jsonl holds one JSON object per logged step (`step` plus namespaced keys, see docs/outputs.md); each line is flushed as it is written, so a crashed run keeps everything up to
its last step. summary.json is rewritten atomically after every evaluation.

On W&B, every job of a sweep joins one group (`logger.group`, else the sweep directory's name),
is named `<algo>-<task>-<seed>`, and carries the run's key choices (`run_identity`) as top-level
config keys next to the full config (under `cfg`), so a dashboard can group and filter by them.
A run that raises finishes its W&B run with a non-zero exit code (shown as failed).

Status: while a run is alive (`RunStatus`), it owns its directory (a claim file, so two runs never
write one directory) and its summary.json carries `process`: pid, host, and a heartbeat time
refreshed every HEARTBEAT_S seconds. A killed process (SIGKILL, power loss) cannot write
"interrupted", so readers infer it: `effective_status` calls a "running" run interrupted when its
pid is gone on this host or its heartbeat is older than STALE_AFTER_S.
"""

from __future__ import annotations

import json
import logging
import math
import os
import socket
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from magrpo.core import records
from magrpo.core.instances import as_data
from magrpo.core.plugins import ProcessExit
from magrpo.core.schema import ConfigError, SetupError
from magrpo.core.writes import pid_alive, start_ticks

log = logging.getLogger(__name__)

HEARTBEAT_S = 30.0
STALE_AFTER_S = 600.0          # 20 missed heartbeats: the process is gone or hung
CLAIM_FILE = ".magrpo-owner.json"


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf become null rather than invalid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(_clean(data), indent=2, sort_keys=False, default=str) + "\n")
    os.replace(tmp, path)


# -- what of a run's config a run's record reads -------------------------------------------------------
# The validated config (magrpo.config.run.RunConfig, EvalRunConfig) lives in a layer above this one:
# these are the parts of it this module reads, which the type checker holds every caller's config to.


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class _Model(Protocol):
    @property
    def name_or_path(self) -> str: ...


class _Agents(Protocol):
    @property
    def num_agents(self) -> int: ...

    @property
    def models(self) -> Sequence[_Model]: ...


class _Algo(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def num_turns(self) -> int: ...


class _Feedback(Protocol):
    @property
    def mode(self) -> str: ...


class _Logger(Protocol):
    """The `logger` group (magrpo.config.schemas.LoggerSchema)."""

    @property
    def name(self) -> str: ...

    @property
    def project(self) -> str: ...

    @property
    def entity(self) -> str | None: ...

    @property
    def group(self) -> str | None: ...

    @property
    def run_name(self) -> str | None: ...

    @property
    def tags(self) -> Sequence[str]: ...

    @property
    def job_type(self) -> str: ...

    @property
    def mode(self) -> str: ...


class RecordedRun(Protocol):
    """A run's validated config as its record reads it (magrpo.config.run.RunConfig: a training
    run's; an EvalRunConfig has `methods`, `checkpoint` and `team` too)."""

    @property
    def label(self) -> str | None: ...

    @property
    def seed(self) -> int: ...

    @property
    def task(self) -> _Named: ...

    @property
    def algo(self) -> _Algo: ...

    @property
    def agents(self) -> _Agents: ...

    @property
    def feedback(self) -> _Feedback: ...

    @property
    def logger(self) -> _Logger: ...


@runtime_checkable
class EvaluatedRun(RecordedRun, Protocol):
    """magrpo-eval's validated config (magrpo.config.run.EvalRunConfig): a run's, and what it evaluates."""

    @property
    def methods(self) -> Sequence[str] | None: ...

    @property
    def checkpoint(self) -> str | None: ...

    @property
    def team(self) -> str | None: ...


def run_identity(cfg: RecordedRun, num_agents: int | None = None) -> dict[str, Any]:
    """The choices a run is compared by: the same keys in summary.json's config and at the top of
    the W&B config. `algo` is the trained algorithm, or for magrpo-eval the evaluated method(s);
    `num_agents`: how many agents a training run's algorithm answers with (its team,
    magrpo.algos; default agents.num_agents)."""
    if isinstance(cfg, EvaluatedRun):     # magrpo-eval's config has `methods`; a training run's does not
        job_type = "eval"
        methods = list(cfg.methods or [])
        trained = cfg.checkpoint or cfg.team       # a checkpoint or an exported team
        algo = ",".join(methods) if methods else ("team" if trained else "baselines")
        num_agents = 1 if methods == ["single"] else cfg.agents.num_agents
    else:
        job_type = cfg.logger.job_type
        algo = cfg.algo.name
        num_agents = cfg.agents.num_agents if num_agents is None else num_agents
    return {"label": cfg.label or algo, "algo": algo, "task": cfg.task.name, "seed": cfg.seed,
            "num_agents": num_agents, "models": [m.name_or_path for m in cfg.agents.models],
            "num_turns": cfg.algo.num_turns, "feedback": cfg.feedback.mode,
            "job_type": job_type}


def sweep_group() -> str | None:
    """`<job name>-<sweep dir name>` inside a Hydra multirun (one W&B group per sweep), else None."""
    try:
        if not HydraConfig.initialized():
            return None
        hc = HydraConfig.get()
        if hc.mode != RunMode.MULTIRUN:
            return None
        return f"{hc.job.name}-{Path(hc.sweep.dir).name}"
    except Exception:  # outside a Hydra app the config is not there to read
        return None


# x-axis and summaries of the logged namespaces: evaluations keep their best (max) and last value.
STEP_METRICS = {"train/*": "last", "eval/*": "max,last", "time/*": "last", "speed/*": "last", "memory/*": "max"}
# -- who runs where ------------------------------------------------------------------------------


def process_record() -> dict[str, Any]:
    pid = os.getpid()
    return {"pid": pid, "host": socket.gethostname(), "pid_start": start_ticks(pid), "started_at": time.time()}


def process_alive(rec: dict | None, now: float | None = None) -> bool | None:
    """True/False when a process record says for sure, None when it cannot (another host, no record)."""
    if not isinstance(rec, dict):
        return None
    if rec.get("host") == socket.gethostname() and rec.get("pid") is not None:
        return pid_alive(rec.get("pid"), rec.get("pid_start"))
    beat = rec.get("heartbeat_at")
    if isinstance(beat, (int, float)):
        return (now or time.time()) - beat <= STALE_AFTER_S
    return None


def effective_status(summary: dict, now: float | None = None) -> str:
    """summary.json's status, except that a "running" run whose process is gone is "interrupted"."""
    status = str(summary.get("status", "unknown"))
    if status == "running" and process_alive(summary.get("process"), now) is False:
        return "interrupted"
    return status


def read_status(run_dir: Path) -> tuple[str, dict]:
    """(effective status, summary) of a run directory; ("missing", {}) without a readable summary."""
    try:
        summary = records.load_json(Path(run_dir) / "summary.json")
    except ConfigError:
        return "missing", {}
    return (effective_status(summary), summary) if isinstance(summary, dict) else ("missing", {})


_ACTIVE: dict[str, RunStatus] = {}


class RunStatus:
    """The live record of one run: claims `run_dir`, keeps summary.json's `process` block and its
    heartbeat current, and records how the run ended. Use as a context manager around the run;
    RunLogger.summary writes through it."""

    def __init__(self, run_dir: Path, kind: str = "train", heartbeat: bool = True):
        self.run_dir, self.kind, self.heartbeat = Path(run_dir), kind, heartbeat
        self.phase = "config"
        self.data: dict[str, Any] | None = None
        self.record = process_record()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the directory claim: one live run per directory ------------------------------------------
    def _claim(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        claim = self.run_dir / CLAIM_FILE
        body = json.dumps(self.record)
        try:
            fd = os.open(claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            owner = self._owner(claim)
            if owner is not None:
                raise ConfigError(f"output_dir={str(self.run_dir)!r} is in use by another run (pid {owner.get('pid')} "
                                  f"on {owner.get('host')}); runs never share a directory, so give this one another "
                                  f"output dir") from None
            write_json(claim, self.record)   # a dead run's claim: take it over
            return
        with os.fdopen(fd, "w") as f:
            f.write(body)

    def _owner(self, claim: Path) -> dict | None:
        """The claim's owner when it is a live process other than this run, else None."""
        try:
            owner = records.load_json(claim, 1 << 16)       # a regular file, small, plain data
        except ConfigError:
            # Being written this instant, or left empty by a crash: young means busy.
            try:
                return {"pid": "?", "host": "?"} if time.time() - claim.stat().st_mtime < 60 else None
            except OSError:
                return None
        if not isinstance(owner, dict):
            return None
        if owner.get("pid") == self.record["pid"] and owner.get("host") == self.record["host"]:
            return owner if str(self.run_dir.resolve()) in _ACTIVE else None
        if owner.get("host") == self.record["host"]:
            return owner if pid_alive(owner.get("pid"), owner.get("pid_start")) else None
        _, summary = read_status(self.run_dir)    # another host: trust its heartbeat
        return owner if process_alive(summary.get("process")) else None

    # -- summary.json ---------------------------------------------------------------------------
    def write(self, data: dict) -> None:
        with self._lock:
            self.data = dict(data)
            self._flush()

    def _flush(self) -> None:
        if self.data is None:
            return
        process = {**self.record, "heartbeat_at": time.time()}
        write_json(self.run_dir / "summary.json", {**self.data, "process": process})

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            with self._lock:
                if self.data is not None and self.data.get("status") == "running":
                    self._flush()

    def fail(self, exc: BaseException) -> None:
        """Record the end of a run that raised: status, the phase it was in and the reason."""
        interrupted = isinstance(exc, KeyboardInterrupt)
        with self._lock:
            data = dict(self.data or {"kind": self.kind})
            reason = str(exc) or type(exc).__name__
            if isinstance(exc, (SystemExit, ProcessExit)):   # code the run called ended it
                reason = f"the run was ended by {'sys.exit' if isinstance(exc, SystemExit) else 'os._exit'}({exc.code!r})"
            data.update(status="interrupted" if interrupted else "failed", phase=self.phase,
                        error=type(exc).__name__, reason=reason)
            if not isinstance(exc, (ConfigError, KeyboardInterrupt)) and (
                    not isinstance(exc, SetupError) or exc.__cause__ is not None):
                data["traceback"] = "".join(traceback.format_exception(exc))[-8000:]
            self.data = data
            self._flush()

    # -- lifetime -------------------------------------------------------------------------------
    def __enter__(self) -> RunStatus:
        self._claim()
        _ACTIVE[str(self.run_dir.resolve())] = self
        if self.heartbeat:
            self._thread = threading.Thread(target=self._beat, name="magrpo-heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if exc is not None:
            self.fail(exc)
        _ACTIVE.pop(str(self.run_dir.resolve()), None)
        try:
            (self.run_dir / CLAIM_FILE).unlink()
        except OSError:
            pass


def set_aside_after(run_dir: Path, step: int) -> int:
    """A run resumed in place from step `step` logs the steps after it again: the rows its first
    attempt logged after `step` move from metrics.jsonl to metrics.after_step_<step>.jsonl (kept,
    not lost), so metrics.jsonl holds one history. Returns how many rows moved."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return 0
    lines = records.read_text(path, records.MAX_LOG_BYTES).splitlines()     # a regular file, bounded
    keep: list[str] = []
    later: list[str] = []
    for line in lines:
        try:
            row = records.parse_json(line, str(path))
            row_step = row.get("step", 0) if isinstance(row, dict) else 0
        except ConfigError:
            row_step = 0
        (later if isinstance(row_step, (int, float)) and row_step > step else keep).append(line)
    if later:
        with open(path.with_name(f"metrics.after_step_{step}.jsonl"), "a") as f:
            f.write("\n".join(later) + "\n")
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(line + "\n" for line in keep))
        os.replace(tmp, path)
    return len(later)


def write_summary(run_dir: Path, data: dict) -> None:
    """summary.json of `run_dir`, through the run's RunStatus when one is alive in this process."""
    status = _ACTIVE.get(str(Path(run_dir).resolve()))
    if status is not None:
        status.write(data)
    else:
        write_json(Path(run_dir) / "summary.json", data)


_WANDB_MODES: dict[str, Literal["online", "offline", "disabled"]] = {
    "online": "online", "offline": "offline", "disabled": "disabled"}


def _wandb_mode(mode: str) -> Literal["online", "offline", "disabled"]:
    """`logger.mode` as W&B takes it (the schema allows these three: LoggerSchema.mode)."""
    if mode in _WANDB_MODES:
        return _WANDB_MODES[mode]
    raise ConfigError(f"logger.mode={mode!r} is not allowed; choose one of: offline, online, disabled")


class RunLogger:
    def __init__(self, cfg: RecordedRun, run_dir: Path, identity: dict[str, Any] | None = None):
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = run_dir / "metrics.jsonl"
        self._file = open(self.metrics_path, "a", buffering=1)
        self.wandb = None
        lg = cfg.logger
        if lg.name == "wandb" and lg.mode != "disabled":
            import wandb  # noqa: PLC0415  optional: W&B logging (logger=wandb) only

            ident = identity or run_identity(cfg)
            group = lg.group or sweep_group() or f"{ident['task']}-{ident['label']}"
            name = lg.run_name or f"{ident['label']}-{ident['task']}-{ident['seed']}"
            self.wandb = wandb.init(
                project=lg.project, entity=lg.entity, group=group, name=name,
                tags=list(lg.tags), job_type=ident["job_type"], mode=_wandb_mode(lg.mode), dir=str(run_dir),
                config={**ident, "run_dir": str(run_dir), "cfg": as_data(cfg)},
                reinit="finish_previous")
            self.wandb.define_metric("step", hidden=True)
            for pattern, summary in STEP_METRICS.items():
                self.wandb.define_metric(pattern, step_metric="step", summary=summary)
            log.info("W&B run %s (%s, group %s) in %s", name, lg.mode, group, run_dir / "wandb")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **{k: (float(v) if isinstance(v, (int, float)) else v) for k, v in metrics.items()}}
        self._file.write(json.dumps(_clean(row)) + "\n")
        if self.wandb is not None:
            self.wandb.log({"step": step, **metrics}, step=step)

    def log_examples(self, step: int, name: str, rows: list[dict]) -> None:
        """Sample completions: a W&B table when W&B is on, and always a jsonl file per run."""
        if not rows:
            return
        with open(self.run_dir / f"{name.replace('/', '_')}.jsonl", "a") as f:
            for r in rows:
                f.write(json.dumps(_clean({"step": step, **r}), default=str) + "\n")
        if self.wandb is not None:
            import wandb  # noqa: PLC0415  optional: W&B logging (logger=wandb) only

            cols: list[str | int] = ["step", "id", "prompts", "completions", "reward"]
            table = wandb.Table(columns=cols, data=[[step, str(r.get("id")), json.dumps(r.get("prompts")),
                                                    json.dumps(r.get("completions")), float(r.get("reward", 0.0))]
                                                   for r in rows])
            self.wandb.log({"step": step, name: table}, step=step)

    def summary(self, data: dict) -> None:
        write_summary(self.run_dir, data)
        if self.wandb is not None:
            for k, v in flatten(data).items():
                if isinstance(v, (int, float, str, bool)) or v is None:
                    self.wandb.summary[k] = v

    def close(self, exit_code: int = 0) -> None:
        """Flush and finish; a non-zero `exit_code` marks the W&B run as failed."""
        self._file.close()
        if self.wandb is not None:
            self.wandb.finish(exit_code=exit_code)
            self.wandb = None


def flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "/"))
        else:
            out[key] = v
    return out
