"""Checkpoints that are whole or absent, and the checks a resume makes against them.

A checkpoint `checkpoints/step_N/` holds one directory per agent (`save_pretrained` weights or
adapter, tokenizer), `trainer_state.pt` (optimizers, schedules, RNG states, step), `config.json`
(the run's resolved config) and, written last, `manifest.json`: the size and sha256 of every
other file. Everything is written into a hidden temporary directory next to it and renamed into
place only once the manifest is on disk, so a crash mid-save leaves no `step_N` at all, and a
`step_N` whose files do not match its manifest (truncated, emptied, edited) is named and skipped
instead of being loaded half.

`resolve` turns what a user passes as `resume=` or `checkpoint=` into a verified checkpoint: a
checkpoint directory as given, or the newest complete checkpoint of a run directory.
`check_resume` refuses a resume whose config differs from the checkpoint's in anything but the
keys listed in MAY_CHANGE_ON_RESUME (docs/outputs.md, "Resuming").
"""

from __future__ import annotations

import enum
import hashlib
import importlib
import json
import logging
import os
import pickle
import re
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from magrpo.core import records
from magrpo.core.schema import CheckpointError, ConfigError  # noqa: F401  (CheckpointError: its home for callers)
from magrpo.core.writes import (
    disk_full_error,
    disk_full_is_one_line,
    is_temp_name,
    remove_stale_temps,
    temp_dir,
)

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"        # written last: the completion marker
TEAM_FILE = "team.json"           # an exported team (magrpo.team.team): a manifest too, but no trainer state
OVERRIDES_FILE = "overrides.yaml"     # an exported team's saved command-line overrides
POPULATION_FILE = "population.json"   # a population's manifest (magrpo-population, magrpo.team.partners)
CONFIG_FILE = "config.json"
STATE_FILE = "trainer_state.pt"
FORMAT = 1
_STEP_RE = re.compile(r"^step_(\d+)$")

# Keys a resume may change; every other key must equal the checkpoint's (docs/outputs.md, "Resuming").
# A prefix covers its sub-keys. They steer how long the run goes, what it logs and evaluates,
# where it writes and on which hardware, none of which changes what the next step computes.
MAY_CHANGE_ON_RESUME = ("max_steps", "resume", "output_dir", "save_every", "save_final", "logger", "eval", "plugins",
                        "algo.micro_batch_size", "hardware", "sandbox")
# What magrpo-eval checks of a checkpoint it loads into the agents it builds.
AGENT_KEYS = ("agents",)


# -- writing ------------------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name != MANIFEST)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_checkpoint(dest: Path, fill: Callable[[Path], None], step: int, config: dict | None,
                     seal: Callable[[Path], None] | None = None) -> Path:
    """Write a checkpoint to `dest` atomically: `fill(tmp_dir)` writes the payload, then the config
    (unless None: an exported team keeps its own in team.json) and the manifest are added,
    `seal(tmp_dir)` runs (an exported team's signature over its manifest) and the directory is
    renamed to `dest` (replacing an older one). A failure removes the temporary directory; one for
    a full disk is raised as magrpo.core.writes.DiskFullError (one line)."""
    with disk_full_is_one_line(dest.parent, dest.name):
        dest.parent.mkdir(parents=True, exist_ok=True)
        # what a killed save or export left (a SIGKILL cleans nothing): of this destination, or of any
        # step of a run's checkpoints/ (the next save is of another step)
        of_steps = _STEP_RE.match(dest.name) is not None
        remove_stale_temps(dest.parent, (lambda n: bool(_STEP_RE.match(n))) if of_steps else (lambda n: n == dest.name))
        tmp = temp_dir(dest.parent, dest.name)
    try:
        fill(tmp)
        if config is not None:
            (tmp / CONFIG_FILE).write_text(json.dumps(json_data(config), indent=2) + "\n")
        files = {}
        for f in _files(tmp):
            _fsync(f)
            files[f.relative_to(tmp).as_posix()] = {"size": f.stat().st_size, "sha256": _sha256(f)}
        manifest = {"format": FORMAT, "step": step, "created": time.time(), "files": files}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
        _fsync(tmp / MANIFEST)
        if seal is not None:
            seal(tmp)
        os.chmod(tmp, 0o777 & ~_umask())     # a directory as mkdir makes it (mkdtemp's is 0700): shareable
        old = None
        if dest.exists():  # saving the same step again (a resume into the same run directory)
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
            os.replace(dest, old)
        os.replace(tmp, dest)
        _fsync(dest.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException as e:
        full = disk_full_error(e, dest.parent, dest.name) if isinstance(e, Exception) else None
        shutil.rmtree(tmp, ignore_errors=True)
        if full is not None:
            raise full from e
        raise
    return dest


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# -- reading ------------------------------------------------------------------------------------

_verified: dict[str, tuple] = {}   # path -> the stat signature it was verified with


def _signature(path: Path, names: Iterable[str]) -> tuple:
    stats = [(path / n).stat() for n in [MANIFEST, *names]]
    return tuple((s.st_size, s.st_mtime_ns, s.st_ino) for s in stats)


def read_manifest(path: Path, what: str = "checkpoint") -> dict:
    if not (path / MANIFEST).exists():
        raise CheckpointError(path, f"incomplete {what}: no {MANIFEST} (the completion marker; the save "
                              f"did not finish, or an older magrpo wrote it)")
    try:
        manifest = records.load_json(path / MANIFEST)
    except ConfigError as e:
        raise CheckpointError(path, f"damaged {what}: {MANIFEST} is unreadable ({e})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), dict):
        raise CheckpointError(path, f"damaged {what}: {MANIFEST} lists no files")
    return manifest


# -- what a shared directory may hold -------------------------------------------------------------
# A checkpoint or an exported team is its manifest: every name it lists is a relative path that
# stays inside the directory, every file resolves inside it (no link out), and the folders that
# loading reads hold nothing the manifest does not list. The one link allowed is the hub cache's:
# a snapshot `<cache>/models--OWNER--NAME/snapshots/<rev>/` whose files link to that repo's `blobs/`.


def _allowed_roots(root: Path) -> list[Path]:
    real = root.resolve()
    roots = [real]
    if real.parent.name == "snapshots" and real.parent.parent.name.startswith("models--"):
        roots.append(real.parent.parent / "blobs")
    return roots


def _inside(path: Path, roots: list[Path]) -> bool:
    try:
        real = path.resolve()
    except (RuntimeError, OSError, ValueError):     # a link loop, a name the file system refuses: not inside
        return False
    return any(real == r or real.is_relative_to(r) for r in roots)


def contained(root: Path, name: str, what: str = "checkpoint") -> Path:
    """`root / name` for a name a manifest (or team.json) gives: refused unless it is a relative
    path without `..` whose file, links followed, stays inside `root` (or its hub-cache blobs)."""
    root = Path(root)
    parts = name.replace("\\", "/").split("/") if isinstance(name, str) else []
    if (not isinstance(name, str) or not name or name.startswith(("/", "~")) or "\\" in name or ":" in parts[0]
            or any(p in ("", ".", "..") for p in parts) or "\0" in name):
        raise CheckpointError(root, f"damaged {what}: it names the path {name!r}, which is not a plain relative "
                              f"path inside the {what}")
    f = root.joinpath(*parts)
    if not _inside(f, _allowed_roots(root)):
        try:
            where = f"to {f.resolve()}"
        except (RuntimeError, OSError, ValueError):
            where = "a link that never ends"
        raise CheckpointError(root, f"refused {what}: {name} leads outside the {what} ({where}); "
                              f"a shared {what} is read only from its own directory")
    return f


def check_only_listed(root: Path, folder: str, files: dict, what: str = "checkpoint") -> None:
    """Refuse a folder that loading reads (an agent's weights and tokenizer) when it holds a file the
    manifest does not list: an added weight file would be read alongside (or instead of) the listed one."""
    base = contained(root, folder, what) if folder not in ("", ".") else Path(root)
    if not base.is_dir():
        raise CheckpointError(root, f"damaged {what}: {folder}/ is missing")
    for f in sorted(base.rglob("*")):
        if f.is_dir() and not f.is_symlink():
            continue
        name = f.relative_to(root).as_posix()
        if name not in files:
            raise CheckpointError(root, f"refused {what}: {name} is not listed in its {MANIFEST} (a {what} is its "
                                  f"manifest; remove the file or export the {what} again)")


def verify(path: Path, required: tuple[str, ...] = (STATE_FILE, CONFIG_FILE), what: str = "checkpoint") -> dict:
    """The manifest of a complete, undamaged checkpoint (or, with `required` and `what`, another
    directory written by write_checkpoint: an exported team); CheckpointError naming the first bad file.
    Every listed name must stay inside the directory (`contained`)."""
    path = Path(path)
    for own in (MANIFEST,):
        if (path / own).is_symlink() and not _inside(path / own, _allowed_roots(path)):
            raise CheckpointError(path, f"refused {what}: {own} leads outside the {what}")
    manifest = read_manifest(path, what)
    files = manifest["files"]
    for name in required:
        if name not in files:
            raise CheckpointError(path, f"damaged {what}: {MANIFEST} does not list {name}")
    for name, meta in files.items():
        if not isinstance(meta, dict):
            raise CheckpointError(path, f"damaged {what}: {MANIFEST} entry {name!r} is not an object")
        f = contained(path, name, what)
        if not f.is_file():
            raise CheckpointError(path, f"damaged {what}: {name} is missing")
        size = f.stat().st_size
        if size != meta.get("size"):
            raise CheckpointError(path, f"damaged {what}: {name} has {size} bytes, the manifest says "
                                  f"{meta.get('size')} (truncated or overwritten)")
    key = str(path.resolve())
    sig = _signature(path, files)
    if _verified.get(key) != sig:   # hashing a multi-GB checkpoint once per process is enough
        for name, meta in files.items():
            if _sha256(path / name) != meta.get("sha256"):
                raise CheckpointError(path, f"damaged {what}: {name} does not match its sha256 in the manifest")
        _verified[key] = sig
    if what == "checkpoint":      # each policy's folder is read whole (its weights and tokenizer)
        for d in sorted(path.iterdir()):
            if d.is_dir() or d.is_symlink():
                check_only_listed(path, d.name, files, what)
    return manifest


def _numpy_globals() -> list:
    """What an RNG state saved by numpy needs (arrays of plain numbers), for weights_only loading."""
    import numpy as np  # noqa: PLC0415  start-up: the run files are read without numpy; only a trainer state needs it

    multiarray = importlib.import_module("numpy._core.multiarray" if hasattr(np, "_core")      # numpy >= 2
                                         else "numpy.core.multiarray")                          # numpy < 2
    return [multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32)), type(np.dtype(np.float64))]


# Enum classes a trainer state may hold (an older magrpo pickled its config with them): registered by
# the module that defines them, which is imported by then; a name read from the file never imports one.
STATE_ENUMS: dict[str, type] = {}


def allow_state_enum(cls: type) -> type:
    """Allow `cls` (an Enum of a config schema) in a trainer state (a class decorator)."""
    if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
        raise TypeError(f"{cls!r} is not an Enum class")
    STATE_ENUMS[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return cls


def load_state(path: Path, name: str = STATE_FILE) -> Any:
    """A checkpoint's trainer state (`trainer_state.pt`, or an fsdp rank's optimizer shard) loaded as
    data only: tensors, numbers, strings, lists and dicts (torch's weights_only unpickler, plus
    numpy's RNG arrays). A file that holds anything else is refused, never executed."""
    import torch  # noqa: PLC0415  start-up: torch loads only where a model does; magrpo-table reads checkpoints without it

    f = Path(path) / name
    try:
        # an older magrpo saved the config with the enums of its own schemas in it: the allow-list,
        # never a module named by the file
        allowed = [*_numpy_globals(), *STATE_ENUMS.values()]
        with torch.serialization.safe_globals(allowed):
            return torch.load(f, weights_only=True)
    except pickle.UnpicklingError as e:
        why = str(e).split("WeightsUnpickler error:")[-1].strip().splitlines()[0] if str(e).strip() else ""
        raise CheckpointError(path, f"refused checkpoint: {name} holds objects other than tensors and plain data "
                              f"({why.rstrip('.')}); a checkpoint's state is loaded as data only, never as "
                              f"code") from None
    except (OSError, RuntimeError, EOFError, ValueError) as e:
        raise CheckpointError(path, f"damaged checkpoint: cannot read {name} ({type(e).__name__}: "
                              f"{str(e).strip().splitlines()[0] if str(e).strip() else ''})") from None


def stored_config(path: Path) -> dict:
    """A checkpoint's config.json as data (the bounded reader; an interpolation in it is refused:
    a resolved config never holds one, and a record's values never resolve)."""
    try:
        data = records.load_json(Path(path) / CONFIG_FILE)
    except ConfigError as e:
        raise CheckpointError(path, f"damaged checkpoint: cannot read {CONFIG_FILE} ({e})") from None
    if not isinstance(data, dict):
        raise CheckpointError(path, f"damaged checkpoint: {CONFIG_FILE} is not a JSON object")
    records.refuse_interpolations(data, str(Path(path) / CONFIG_FILE))
    return data


def step_dirs(root: Path) -> list[tuple[int, Path]]:
    """(step, dir) of every `step_N` under `root`, newest first (temporary dirs are hidden, so skipped)."""
    out = []
    for d in root.iterdir() if root.is_dir() else []:
        m = _STEP_RE.match(d.name)
        if m and d.is_dir():
            out.append((int(m.group(1)), d))
    return sorted(out, reverse=True)


def is_team_dir(path: str | os.PathLike) -> bool:
    """A directory magrpo-export wrote (magrpo.team.team): it holds team.json."""
    return (Path(str(path)).expanduser() / TEAM_FILE).is_file()


def missing_checkpoint(p: Path) -> str | None:
    """For a checkpoint path that does not exist (`RUN/checkpoints/step_9`) of a run that does:
    what to say, with the checkpoints the run has; None for any other path."""
    p = Path(p)
    if p.parent.name != "checkpoints" or not p.parent.parent.is_dir():
        return None
    have = [f"{d.name}" + ("" if (d / MANIFEST).is_file() else " (incomplete)")
            for _, d in sorted(step_dirs(p.parent))]
    return (f"no such checkpoint; the run {p.parent.parent} has " +
            (", ".join(have) if have else "no checkpoint (nothing under checkpoints/)"))


def _looks_like_checkpoint(p: Path) -> bool:
    return (p / MANIFEST).exists() or (p / STATE_FILE).exists() or bool(_STEP_RE.match(p.name))


def resolve(path: str | os.PathLike, key: str) -> Path:
    """The verified checkpoint that `key=path` names: the checkpoint itself, or the newest complete
    one of a run directory (or of its `checkpoints/`), skipping damaged ones with a warning."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ConfigError(f"{key}={str(path)!r}: {missing_checkpoint(p) or 'no such checkpoint or run directory'}")
    if not p.is_dir():
        raise ConfigError(f"{key}={str(path)!r} is a file; give a checkpoint directory (.../checkpoints/step_N) "
                          f"or a run directory")

    if is_temp_name(p.resolve().name):
        raise ConfigError(f"{key}={str(path)!r} is the temporary directory of a save that did not finish; it is no "
                          f"checkpoint: give the run directory or one of its checkpoints/step_N")
    if is_team_dir(p):
        raise ConfigError(f"{key}={str(path)!r} is an exported team (team.json), not a training run or checkpoint; "
                          f"evaluate it with magrpo-eval team=..., load it with Team.from_pretrained")
    if _looks_like_checkpoint(p):
        try:
            verify(p)
        except CheckpointError as e:
            raise CheckpointError(str(path), e.why, key) from None
        return p
    root = p / "checkpoints" if (p / "checkpoints").is_dir() else p
    candidates = step_dirs(root)
    if not candidates:
        raise ConfigError(f"{key}={str(path)!r}: neither a checkpoint (no {MANIFEST}) nor a run directory with "
                          f"checkpoints/step_N")
    damaged = []
    for _, d in candidates:
        try:
            verify(d)
        except CheckpointError as e:
            log.warning("skipping %s", e)
            damaged.append(str(e))
            continue
        if damaged:
            log.warning("using %s, the newest complete checkpoint of %s", d, p)
        return d
    raise CheckpointError(str(path), "no complete checkpoint; " + "; ".join(damaged), key)


def checkpoint_step(path: Path) -> int:
    return int(read_manifest(Path(path)).get("step", -1))


# -- config checks ------------------------------------------------------------------------------


def json_data(node: Any) -> Any:
    """JSON's view of a config (enums and paths as strings), so a stored and a live config compare."""
    return json.loads(json.dumps(node, default=str))


# Keys only the caller decides, wherever they sit (agents.models[0].trust_remote_code): never taken
# from a run, checkpoint or team (how much code is trusted, how model-written code is confined), so
# they never count as a difference from one.
CALLER_KEYS = ("trust_remote_code", "trust_plugins", "isolation")     # isolation: sandbox.isolation


def _covered(key: str, prefixes: Iterable[str]) -> bool:
    """Whether `key` is one of `prefixes` or under one; `[*]` in a prefix stands for any list index."""
    if key.rpartition(".")[2] in CALLER_KEYS:
        return True
    any_index = re.sub(r"\[\d+\]", "[*]", key)
    return any(k == p or k.startswith((p + ".", p + "[")) for p in prefixes for k in (key, any_index))


MISSING = "<absent>"


def _diff(a: Any, b: Any, key: str, out: list[tuple[str, Any, Any]]) -> None:
    """Differences between two JSON trees, at the deepest key where they show."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            _diff(a.get(k, MISSING), b.get(k, MISSING), f"{key}.{k}" if key else str(k), out)
    elif (isinstance(a, list) and isinstance(b, list) and len(a) == len(b)
          and all(isinstance(x, dict) for x in a + b)):
        for i, (x, y) in enumerate(zip(a, b)):
            _diff(x, y, f"{key}[{i}]", out)
    elif a != b and not _absent_is_null(a, b):
        out.append((key, a, b))


def _absent_is_null(a: Any, b: Any) -> bool:
    """A key an older magrpo did not write (absent) and the same key at null now are no change: a
    new optional key never blocks resuming or evaluating an older checkpoint."""
    return (a is MISSING and b is None) or (a is None and b is MISSING)


def config_changes(old: dict, new: dict, only: Iterable[str] | None = None,
                   free: Iterable[str] = MAY_CHANGE_ON_RESUME) -> list[tuple[str, Any, Any]]:
    """(key, old, new) for every key that differs, outside `free` (and inside `only` when given)."""
    diffs: list[tuple[str, Any, Any]] = []
    _diff(json_data(old), json_data(new), "", diffs)
    only = tuple(only) if only is not None else None
    out = [d for d in diffs if not _covered(d[0], free) and (only is None or _covered(d[0], only))]
    # A node whose `name` changed (task=tldr instead of length_ratio) differs in all its settings:
    # say so once instead of listing each of them.
    renamed = [k[:-len(".name")] for k, _, _ in out if k.endswith(".name")]
    return [c for c in out if c[0].endswith(".name") or not _covered(c[0], renamed)]


def describe(changes: list[tuple[str, Any, Any]], limit: int = 12) -> str:
    shown = [f"{k}: {v0!r} -> {v1!r}" for k, v0, v1 in changes[:limit]]
    more = f"; and {len(changes) - limit} more" if len(changes) > limit else ""
    return "; ".join(shown) + more


def check_resume(cfg: dict, ckpt: Path) -> None:
    """Refuse a resume that would not continue the checkpoint's run: a changed agent, task, reward,
    algorithm, optimizer, seed or group size, or a max_steps the checkpoint has already reached.
    `cfg`: the validated config as a plain dict (magrpo.core.instances.as_data), compared key by key."""
    changes = config_changes(stored_config(ckpt), cfg)
    if changes:
        raise ConfigError(f"resume={str(cfg['resume'])!r}: the checkpoint was trained with a different config "
                          f"({describe(changes)}); these keys must stay as they were. A resume may change only: "
                          f"{', '.join(MAY_CHANGE_ON_RESUME)} (docs/outputs.md, 'Resuming')")
    step = checkpoint_step(ckpt)
    if cfg["max_steps"] <= step:
        raise ConfigError(f"max_steps={cfg['max_steps']}: the checkpoint {ckpt} is already at step {step}; "
                          f"set max_steps above {step} to train further")


def check_agents_match(cfg: dict, ckpt: Path, policy_dirs: list[str], key: str = "checkpoint") -> None:
    """Refuse to load a checkpoint into agents built from a different `agents` config, or into
    more policies than it holds (a single-policy run's checkpoint under a multi-agent algo).
    `policy_dirs`: the directories the policies to build load from (TeamSpec.policy_dirs)."""
    changes = config_changes(stored_config(ckpt), cfg, only=AGENT_KEYS, free=())
    if changes:
        raise ConfigError(f"{key}={str(ckpt)!r} holds agents trained with a different agents config "
                          f"({describe(changes)}); pass the agents=... options the training run used")
    missing = [d for d in policy_dirs if not (Path(ckpt) / d).is_dir()]
    if missing:
        held = sorted(d.name for d in Path(ckpt).iterdir() if d.is_dir() and (d.name.startswith("agent_")
                                                                              or d.name == "policy"))
        raise ConfigError(f"{key}={str(ckpt)!r} holds {len(held)} policy(ies) ({', '.join(held)}) but "
                          f"algo={cfg['algo']['name']} builds {len(policy_dirs)} "
                          f"({', '.join(policy_dirs)}); pass the algo=... and agents=... the training run used")
