"""Inside a job: how a failure is reported and what exit code it gets (magrpo.launch), and the one
line an interrupt (Ctrl-C, or a SIGTERM) ends with."""

from __future__ import annotations

import importlib
import logging
import os
import shlex
import shutil
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from magrpo.core import records
from magrpo.core.checkpoint import resolve
from magrpo.core.overrides import override_key
from magrpo.core.plugins import ProcessExit, code_folders, exits_raise, origin_line
from magrpo.core.schema import ConfigError, SetupError
from magrpo.core.tracking import read_status

log = logging.getLogger("magrpo")


def output_dir(cfg: DictConfig) -> Path:
    try:
        return Path(str(cfg.output_dir))
    except OmegaConfBaseException as e:
        raise ConfigError(f"output_dir cannot be resolved: {str(e).splitlines()[0]}") from None


def quiet_progress_bars() -> None:
    """HF's per-file progress bars (every checkpoint save and load) drown the training log. Said
    through HF_HUB_DISABLE_PROGRESS_BARS (unless the user set it), which huggingface_hub reads when it
    is imported and transformers follows, so a command that stops at a config error never imports
    transformers (1.4 s); where either library is imported already, it is told directly."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] != "1":
        return
    if "transformers" in sys.modules:
        sys.modules["transformers"].utils.logging.disable_progress_bar()
    elif "huggingface_hub" in sys.modules:      # its `utils` is not one of the package's lazy attributes
        importlib.import_module("huggingface_hub.utils").disable_progress_bars()


# -- reporting -----------------------------------------------------------------------------------


def _file_log(level: int, msg: str) -> None:
    """Into the run's log file only: the console already got the message on stderr."""
    record = log.makeRecord(log.name, level, __file__, 0, msg, (), None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def report(prog: str, msg: str) -> None:
    print(f"{prog}: {msg}", file=sys.stderr, flush=True)
    _file_log(logging.ERROR, msg)


def _job() -> tuple[bool, str]:
    """(in a multirun, a name for this job)."""
    if not HydraConfig.initialized():
        return False, ""
    hc = HydraConfig.get()
    if hc.mode != RunMode.MULTIRUN:
        return False, ""
    node = hc if isinstance(hc, DictConfig) else OmegaConf.structured(hc)   # hydra's node, typed HydraConf
    overrides = OmegaConf.select(node, "job.override_dirname", default="")
    return True, f"job {OmegaConf.select(node, 'job.num', default='?')}" + (f" ({overrides})" if overrides else "")


def run_job(fn: Callable[[DictConfig], Any], cfg: DictConfig, prog: str) -> Any:
    """`fn(cfg)` as a Hydra job, failing as magrpo.launch says. Returns fn's result, or None for a
    failed job of a multirun. An interrupt leaves as `Interrupted`, naming the job's run directory."""
    multirun, name = _job()
    where = f"{name}: " if multirun else ""
    try:
        run_dir: Path | None = output_dir(cfg)
    except ConfigError:
        run_dir = None
    try:
        with exits_raise():
            return fn(cfg)
    except KeyboardInterrupt as e:
        raise Interrupted(run_dir, *stopped(e)) from None
    except (SystemExit, ProcessExit) as e:   # code the run called (a plugin, a reward) ended it: say which
        how = f"{'os._exit' if isinstance(e, ProcessExit) else 'sys.exit'}({e.code!r})"
        report(prog, f"{where}failed: the run was ended by {how}, called at {origin_line(e, code_folders())}; it did "
                     f"not finish{f' ({run_dir}/summary.json)' if run_dir else ''}")
        if multirun:
            return None
        code = 1
    except ConfigError as e:
        report(prog, f"{where}{getattr(e, 'label', 'config error')}: {e}")    # a RewardError: "reward error"
        if not multirun and run_dir is not None:
            discard_unstarted(run_dir)     # a sweep keeps its failed jobs' records: its table lists them
        code = 2
    except SetupError as e:
        report(prog, f"{where}setup error: {e}")
        code = 1
    except Exception as e:
        if not multirun:
            raise
        _file_log(logging.ERROR, "".join(traceback.format_exception(e)))
        report(prog, f"{where}failed: {type(e).__name__}: {e}")
        return None
    if multirun:
        return None
    sys.exit(code)


# What a single run leaves when its config is refused before any work: Hydra's saved config, the
# log (named after the job: conf/train.yaml's and conf/eval.yaml's hydra.job.name), and the summary
# that records the refusal.
UNSTARTED = (".hydra", "train.log", "eval.log", "summary.json")


def discard_unstarted(run_dir: Path) -> bool:
    """Remove the folder of a single run whose config was refused (its summary: failed in phase
    "config"), when it holds nothing but what that attempt wrote (UNSTARTED): the error line on
    stderr said everything, and an empty failed run would sit among the real ones. A folder with
    anything else in it (an earlier run, the user's files) is left as it is. True when removed."""
    try:
        summary = records.load_json(run_dir / "summary.json")
        names = {p.name for p in run_dir.iterdir()}
    except (OSError, ValueError):
        return False
    if not isinstance(summary, dict):
        return False
    if summary.get("status") != "failed" or summary.get("phase") != "config" or not names <= set(UNSTARTED):
        return False
    hydra = run_dir / ".hydra"
    if hydra.is_dir() and not hydra.is_symlink() and \
            {p.name for p in hydra.iterdir()} <= {"config.yaml", "hydra.yaml", "overrides.yaml"}:
        shutil.rmtree(hydra)
    for name in UNSTARTED[1:]:
        (run_dir / name).unlink(missing_ok=True)
    try:
        run_dir.rmdir()
    except OSError:
        return False
    return True


# -- interrupts ----------------------------------------------------------------------------------


class Terminated(KeyboardInterrupt):
    """A SIGTERM (what `kill`, `timeout`, SLURM and Kubernetes send to stop a process), raised where
    the process was, as Ctrl-C raises KeyboardInterrupt: a command stops the same way (its checkpoint
    policy, `summary.json` says interrupted, one last line with the resume command), and exits 143
    (128 + SIGTERM) where Ctrl-C exits 130."""

    def __init__(self) -> None:
        super().__init__(f"stopped by {signal.SIGTERM.name}")


def stopped(e: BaseException) -> tuple[str, int]:
    """How a command's last line words an interrupt, and the exit code it ends with."""
    if isinstance(e, Interrupted):
        return e.how, e.code
    return (str(e), 128 + signal.SIGTERM) if isinstance(e, Terminated) else ("interrupted", 128 + signal.SIGINT)


@contextmanager
def term_as_interrupt() -> Iterator[None]:
    """Inside: a SIGTERM raises Terminated in the main thread. A second one while the command winds
    down (its records, its last line) is ignored; SIGKILL still ends it. Off the main thread signals
    are not ours to handle, and nothing changes."""
    def stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated

    try:
        before = signal.signal(signal.SIGTERM, stop)
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or a SIGTERM during a job, carrying the job's run directory, the words for it and the
    exit code out to the command (cli_main), which ends with interrupt_report's line."""

    def __init__(self, run_dir: Path | None = None, how: str = "interrupted", code: int = 130) -> None:
        super().__init__(run_dir)
        self.run_dir, self.how, self.code = run_dir, how, code


def interrupt_report(prog: str, run_dir: Path | None, argv: list[str], how: str = "interrupted",
                     resumable: bool = True) -> str:
    """One line for Ctrl-C or a SIGTERM (`how`: "interrupted", "stopped by SIGTERM"): the step reached,
    the status recorded and the exact resume command (the run's saved overrides, else the command
    line's `argv`); for a command that keeps no checkpoint (`resumable` false: magrpo-eval), the
    command that runs it again, into a new directory."""
    if run_dir is None:
        return f"{how} before a run started; nothing was written"
    status, summary = read_status(run_dir)
    try:
        given = records.load_yaml(Path(run_dir) / ".hydra" / "overrides.yaml") or []
    except ValueError:
        given = [a for a in argv if not a.startswith("-")]
    if not resumable:       # into a directory of its own: this one holds the interrupted run's record
        again = shlex.join([prog, *(o for o in given if override_key(o) not in ("hydra.run.dir", "output_dir"))])
        return f"{how}; {run_dir}/summary.json says {status}; run it again with: {again}"
    where = f"{how} at step {summary.get('steps', 0)}; {run_dir}/summary.json says {status}"
    try:
        ckpt = resolve(run_dir, "resume")
    except Exception:
        return f"{where}; no checkpoint was saved, so it cannot be resumed (save_every=N saves one every N steps)"
    keep = [o for o in given if override_key(o) not in ("resume", "hydra.run.dir", "output_dir")]
    cmd = shlex.join([prog, *keep, f"resume={run_dir}", f"hydra.run.dir={run_dir}"])
    return f"{where} (checkpoint {Path(ckpt).name}); resume with: {cmd}"
