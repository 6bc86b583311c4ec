"""Shared fixtures: Hydra-composed configs over conf/, and an isolated model cache per session."""

from __future__ import annotations

# isort: off
import magrpo.core.process  # noqa: F401  (first: the process defaults, before torch loads)
# isort: on

import os
import tempfile
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from magrpo.launch import CONF_DIR
from magrpo.validation.store import register_schemas

register_schemas()      # what every entry point does first: conf/ composes without importing one

# The tests sign and trust runs with a key of their own (magrpo.core.trust), never the user's: one home for
# the whole session, set before pytest-xdist starts its workers, so a run made in one worker is
# "made by you" in another. A test that plays a second user gives its own MAGRPO_HOME.
os.environ["MAGRPO_HOME"] = str(Path(tempfile.gettempdir()) / f"magrpo-test-home-{os.getuid()}")

# Hub look-ups fail fast instead of retrying; the tests never need the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `make test` runs one worker per core: a torch thread each, or the workers fight over the cores
    # (training runs set their own count from hardware.num_threads, 1 on the CPU).
    import torch

    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def library_log_handlers_outlive_capsys():
    """A library that sets up its logging when first imported (transformers, datasets: cli_main
    imports transformers) binds its stderr handler to the sys.stderr of that moment. Inside a test
    that uses capsys that stream is closed when the test ends, and the library's next warning, in
    a later test, becomes a '--- Logging error --- Traceback' on that test's stderr: a test that
    asserts no traceback (a sweep's report) then fails by test order. After each test (and after
    capsys has put sys.stderr back), such a handler writes to the current stderr again."""
    yield
    import logging
    import sys

    loggers = [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    for handler in {h for lg in loggers for h in lg.handlers}:
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler) \
                and getattr(handler.stream, "closed", False):
            handler.stream = sys.stderr           # (setStream would flush the closed one first)
            vars(handler).pop("flush", None)      # transformers binds flush to that stream's own


@pytest.fixture(autouse=True)
def plugins_imported_by_a_test_stay_in_it():
    """A run records every plugin imported in its process (magrpo.core.plugins.loaded), and the trust rule
    remembers what this process allowed (magrpo.core.trust). A test that
    imports one from a folder of its own (the README's my_game.py) would otherwise have every later
    run of its worker record it too, and a subprocess export of such a run then fails to import it:
    each test starts from, and leaves, the plugin record it found."""
    from magrpo.core import plugins, trust

    loaded, code, conf = dict(plugins._loaded), dict(plugins._code), list(plugins._conf_dirs)
    allowed, command = dict(trust._allowed), dict(trust._command)
    yield
    plugins._loaded.clear()
    plugins._loaded.update(loaded)
    plugins._code.clear()
    plugins._code.update(code)
    plugins._conf_dirs[:] = conf
    trust._allowed.clear()            # what a test trusted stays in it too
    trust._allowed.update(allowed)
    trust._command.clear()
    trust._command.update(command)


_COMPOSED: dict[tuple[str, tuple[str, ...]], object] = {}


def compose_cfg(overrides: list[str] | None = None, config_name: str = "train"):
    """The composed config exactly as `magrpo-train OVERRIDES` sees it (hydra:* resolvable).

    A composition costs 0.2-0.4 s (Hydra reads every file of the defaults tree again), up to half
    of a small test; the same overrides give the same config, so each list is composed once per
    process and handed out as a copy. `output_dir=` is left out of the key and set on the copy."""
    import copy

    from omegaconf import open_dict

    overrides = list(overrides or [])
    dirs = [o.split("=", 1)[1] for o in overrides if o.startswith("output_dir=")]
    key = (config_name, tuple(o for o in overrides if not o.startswith("output_dir=")))
    if key not in _COMPOSED:
        register_schemas()      # as every entry point: a plugin's task registered since is offered too
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            _COMPOSED[key] = compose(config_name=config_name, overrides=list(key[1]), return_hydra_config=False)
    cfg = copy.deepcopy(_COMPOSED[key])
    if dirs:
        with open_dict(cfg):
            cfg.output_dir = dirs[-1]     # the last one wins, as on the command line
    return cfg


@pytest.fixture
def make_cfg(tmp_path):
    """Compose a train config whose output_dir is a fresh tmp dir."""
    def _make(overrides: list[str] | None = None, out: str | None = None):
        return compose_cfg([f"output_dir={out or tmp_path / 'run'}", *(overrides or [])])

    return _make


def train_rows(run_dir) -> dict[int, dict]:
    """Step -> the training metrics logged at it, from a run's metrics.jsonl."""
    import json
    from pathlib import Path

    rows = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in rows if "train/reward_mean" in r}


def build_algorithm(make_cfg, overrides: list[str]):
    """(cfg, agents, task, algorithm) of a composed train config, seeded as a run starts: for tests
    that drive an algorithm's pieces (collect, advantages, update) directly."""
    from magrpo.algos import ALGOS
    from magrpo.models.agents import load_agents, seed_everything
    from magrpo.tasks import build_task
    from magrpo.validation.checks import validate

    cfg = validate(make_cfg(overrides))
    seed_everything(cfg.seed)
    cls = ALGOS[cfg.algo.name]
    team = cls.team(cfg)
    agents = load_agents(cfg.agents, cfg.hardware, team.num_agents, need_reference=team.reference)
    task = build_task(cfg.task, cfg.reward)
    return cfg, agents, task, cls(cfg, agents, task)


def run_and_resume(make_cfg, tmp_path, common: list[str], at: int = 2) -> tuple[dict[int, dict], dict[int, dict]]:
    """Train once uninterrupted and once resumed from the first run's step-`at` checkpoint; the
    training rows of both (the resumed run logs only the steps after `at`)."""
    from magrpo.cli.train import run

    full, resumed = tmp_path / "full", tmp_path / "resumed"
    run(make_cfg(common, out=str(full)))
    run(make_cfg([*common, f"resume={full / 'checkpoints' / f'step_{at}'}"], out=str(resumed)))
    return train_rows(full), train_rows(resumed)


def run_cli(main, prog: str, args: list[str]) -> int:
    """`PROG ARGS` through a Hydra entry point's `main`, in this process: its exit code. A fresh
    interpreter per command costs more than the tiny runs the tests ask of it; the end-to-end
    tests keep a subprocess. Hydra leaves logging alone here (its dictConfig would close every
    handler in the process, pytest's capture included), and its singletons are put back
    afterwards, so later tests see no trace of the command."""
    import copy
    import sys
    import warnings

    from hydra.core.singleton import Singleton

    state = copy.deepcopy(Singleton.get_state())
    argv, sys.argv = sys.argv, [prog, *args, "hydra/job_logging=none", "hydra/hydra_logging=none"]
    try:
        with warnings.catch_warnings():
            # torchrun's @record wants a real stderr for its fault handler; a captured test has none.
            warnings.filterwarnings("ignore", "Unable to enable fault handler")
            main()
        return 0
    except SystemExit as e:
        if e.code is not None and not isinstance(e.code, int):
            print(e.code, file=sys.stderr)      # what the interpreter would have printed on exit
        return e.code if isinstance(e.code, int) else int(e.code is not None)
    finally:
        sys.argv = argv
        Singleton.set_state(state)


def tree_digest(root) -> dict[str, str]:
    """Every file under `root` (hidden ones included) -> its sha256, every directory -> "<dir>": to
    check that a refused or failed command changed nothing there, byte for byte."""
    import hashlib
    from pathlib import Path

    root = Path(root)
    return {p.relative_to(root).as_posix(): "<dir>" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*"))}


def small_tmpfs(path, size: str):
    """A context manager: a tmpfs of `size` ("256k") mounted at `path` (made) for the block, a
    disk that really fills up. It needs root and a kernel that lets the test mount: elsewhere the
    test is skipped, saying so (the failures injected with monkeypatch cover the same code)."""
    import contextlib
    import os
    import subprocess
    from pathlib import Path

    @contextlib.contextmanager
    def mounted():
        Path(path).mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs (a disk that really fills up) needs root")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
        try:
            yield Path(path)
        finally:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)

    return mounted()
