"""The trust rule: what a run or team records acts for no one until you say so.

A run directory, a checkpoint and an exported team record *code references*: the plugins the run
imported (`plugins`), the reward functions it scored with (`reward.fn`/`reward.fns` written
`module:function`) and the extra config directories it composed with (`hydra.searchpath`). A
command that takes one up (`magrpo-eval checkpoint=`/`team=`, `magrpo-train resume=`,
`magrpo-export`, `magrpo-crossplay`, `magrpo-table`, `Team.from_pretrained`, `Team.from_run`)
imports those modules, and composes with those directories, only when each one is

  * named by you: your own `plugins=`/`--plugins`/`reward.fn=`, MAGRPO_PLUGINS, an entry point of
    a package you installed (never one found inside or beside the directory);
  * made by you: the directory carries `signature.json`, an HMAC-SHA256 keyed by a secret of yours
    that lives outside it (`$MAGRPO_HOME/secret`, by default `~/.config/magrpo/secret`, made on
    first use with mode 0600), as Jupyter signs the notebooks you ran. It binds the whole
    directory: its place (the resolved path), the sha256 of the records a command takes it up by
    (a team's manifest, which lists every file; a run's `.hydra/` files and each checkpoint's
    manifest) and the code it references. `magrpo-train` signs every run it writes (again after
    each checkpoint), `magrpo-export` every team; a copy elsewhere, an edited record or a
    reference added since is not covered;
  * trusted by you: `magrpo-trust DIR` (what DIR records now, kept in `$MAGRPO_HOME/trusted.json`,
    as direnv's `allow`), or `trust_plugins=true` / `--trust-plugins` / `trust_plugins=True` for
    the directories this one command or call names, and for as long as it runs.

Otherwise the command stops before anything is imported or composed, in one line that lists what
the directory records and the command that trusts it. Trust is not passed on: a run resumed from
a directory trusted by the last rule signs only the references that are yours, so the sender's
need trusting again; a directory that a record names (its `partners`, its `diversity` members)
needs its own say (its signature or `magrpo-trust`), and is checked when the record is taken up.

Keys that choose where data goes or what is read (magrpo.core.key_classes: *reach* keys) are taken up
only from a directory you made; from any other, each is skipped in one line and you give it again.
A directory you did not make is taken up only while no folder on `sys.path` is the directory,
inside it, or the folder that holds it: modules that came with it would be importable.

Modules of this package (`magrpo.*`) are installed code and need no trust; a standard-library
module or a package's `__main__` is never taken as a plugin or reward module.
"""

from __future__ import annotations

import functools
import hmac
import json
import logging
import os
import shlex
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig

from magrpo.core import records
from magrpo.core.checkpoint import CONFIG_FILE, MANIFEST, OVERRIDES_FILE, TEAM_FILE, verify
from magrpo.core.instances import as_data
from magrpo.core.overrides import override_key, parse_override
from magrpo.core.plugins import (
    check_location,
    check_name,
    entry_point_places,
    forms,
    import_plugin,
    locate,
    named_by_user,
    shown,
    within_or_beside,
)
from magrpo.core.records import RecordError
from magrpo.core.schema import ConfigError
from magrpo.core.signatures import (
    RUN_RECORDS,
    Signature,
    _folders,
    _mac,
    _place,
    _secret,
    _sha256,
    _write_signature,
    home,
    made_by_you,
    signature,
    trust_root,
    write_signature,
)

if TYPE_CHECKING:       # a validated config (magrpo.config.run.RunConfig) is schema instances
    from _typeshed import DataclassInstance

log = logging.getLogger("magrpo")
STORE_FILE = "trusted.json"
MAX_REFS = 256              # references one directory may record (its plugins are also capped per list)
MAX_FILE_BYTES = records.MAX_FILE_BYTES   # a record larger than this is not read for references: it is refused
MAX_TOTAL_BYTES = 64 << 20  # what one directory's records may add up to
MAX_NAMED_DIRS = 64         # directories one record may name (partners, diversity)
_budget = {"bytes": 0}
# The record keys that name other directories taken up with a run (magrpo.team.partners, algos.diversity).
NAMING_KEYS = ("partners", "diversity")

# How a reference was allowed. The first two are yours; the last two trust someone else's.
NAMED, SIGNED, STORED, FLAG = "named by you", "made by you (signature checked)", "trusted with magrpo-trust", \
    "trusted by trust_plugins on this command"
OWN = (NAMED, SIGNED)
_RANK = {NAMED: 0, SIGNED: 1, STORED: 2, FLAG: 3}


class UntrustedError(ConfigError):
    """A directory records code that is not trusted here: one line listing it and how to trust it."""


@dataclass(frozen=True)
class Ref:
    """One code reference a directory records: `kind` plugin | reward | config dir, its `value`
    (a module, module:function, or a search path entry) and the file that records it."""

    kind: str
    value: str
    file: str

    @property
    def code(self) -> str:
        """What trust is about: `module:M` (a module to import) or `config:ENTRY` (a directory to compose)."""
        if self.kind == "config dir":
            return f"config:{self.value}"
        return f"module:{self.value.partition(':')[0] if self.kind == 'reward' else self.value}"

    @property
    def module(self) -> str | None:
        return None if self.kind == "config dir" else self.code.partition(":")[2]

    @property
    def name(self) -> str:
        """In words: `plugin 'm'`, `reward function 'm:f'`, `config directory 'file:///x'`."""
        kind = {"reward": "reward function", "config dir": "config directory"}.get(self.kind, self.kind)
        return f"{kind} {shown(self.value, 60)}"

    def __str__(self) -> str:
        return f"{self.name} ({self.file})"


def _store_mac(key: bytes, codes: Iterable[str]) -> str:
    return _mac(key, {"format": 1, "code": sorted(set(codes))})


def _read_json(f: Path) -> Any:
    return records.parse_json(_text(f), str(f))


def _text(f: Path) -> str:
    """A record's text through the bounded reader; the records of one take-up add up to at most
    MAX_TOTAL_BYTES."""
    text = records.read_text(f)
    _budget["bytes"] += len(text)
    if _budget["bytes"] > MAX_TOTAL_BYTES:
        raise RecordError(f"{f}: the directory's records add up to more than {MAX_TOTAL_BYTES >> 20} MB")
    return text


def _store() -> dict[str, Any]:
    try:
        data = records.load_json(home() / STORE_FILE)
        return data if isinstance(data, dict) and isinstance(data.get("dirs"), dict) else {"dirs": {}}
    except (OSError, ConfigError):
        return {"format": 1, "dirs": {}}


def _save_store(data: dict[str, Any]) -> None:
    f = home() / STORE_FILE
    f.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = f.with_name(f".{STORE_FILE}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps({"format": 1, "dirs": data["dirs"]}, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, f)


def stored(root: Path) -> set[str]:
    """What `magrpo-trust` recorded as trusted for `root` (by its resolved path)."""
    where = _place(root)
    entry = _store()["dirs"].get(where)
    key = _secret(create=False)
    if not isinstance(entry, dict) or key is None:
        return set()
    codes = entry.get("code")
    if not isinstance(codes, list) or not hmac.compare_digest(_store_mac(key, [where, *codes]),
                                                             str(entry.get("hmac", ""))):
        return set()
    return set(codes)


def _values(line: str) -> list[Any]:
    try:
        value = parse_override(line).value()
    except Exception:
        return [line.partition("=")[2]]         # unparsable: its text, refused as a name below
    return value if isinstance(value, list) else [value]


def _refs_of_config(stored: object, file: str) -> list[Ref]:
    """The references a config's plain data (team.json's `config`, a checkpoint's config.json,
    .hydra/config.yaml, as read: any shape) holds."""
    if not isinstance(stored, dict):
        return []
    out = [Ref("plugin", str(m), f"{file} plugins") for m in _as_list(stored.get("plugins"))]
    reward = stored.get("reward")
    if isinstance(reward, dict):
        for key in ("fn", "fns"):
            out += [Ref("reward", str(s), f"{file} reward.{key}") for s in _as_list(reward.get(key)) if _is_code(s)]
    return out


def _is_code(spec: Any) -> bool:
    """A reward spec that names code: `module:function`, or an interpolation that could make one."""
    return spec is not None and (":" in str(spec) or "${" in str(spec))


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _refs_of_lines(lines: Any, file: str) -> list[Ref]:
    """The references saved override lines hold (`plugins=`, `reward.fn=`, `reward.fns=`)."""
    out: list[Ref] = []
    for line in _as_list(lines):
        if not isinstance(line, str) or line.startswith("~") or "=" not in line:
            continue
        key = override_key(line)
        if key == "plugins":
            out += [Ref("plugin", str(v), f"{file}: {shown(line, 60)}") for v in _values(line) if v not in (None, "")]
        elif key in ("reward.fn", "reward.fns"):
            out += [Ref("reward", str(v), f"{file}: {shown(line, 60)}") for v in _values(line) if _is_code(v)]
    return out


def _read(f: Path, how: str) -> Any:
    """A record's content (`how`: json | yaml | lines, each read as the command that uses it reads
    it); None when it is absent; an unreadable one is refused: what cannot be read for its
    references is not taken up either."""
    if not f.is_file() and not f.is_symlink():
        return None
    try:
        if how == "json":
            return _read_json(f)
        return records.parse_yaml(_text(f), str(f))
    except RecordError as e:
        raise RecordError(f"{e}, so what it records cannot be checked") from None


def _folder_refs(folder: Path, where: str) -> list[Ref]:
    """What one folder's records name: a team's team.json and overrides.yaml, a run's .hydra/
    (config, overrides, search path) and a checkpoint's config.json."""
    at = f"{where}/" if where else ""
    team = _read(folder / TEAM_FILE, "json")
    if isinstance(team, dict):      # a resolved config: a value holding an interpolation is refused here
        records.refuse_interpolations(team.get("config"), str(folder / TEAM_FILE))
    refs = _team_refs(team, at) + _refs_of_lines(_read(folder / OVERRIDES_FILE, "lines"), f"{at}{OVERRIDES_FILE}")
    if team is not None:            # a team is taken up by these two alone (an added .hydra/ is never read)
        return refs
    refs += _refs_of_config(_read(folder / ".hydra" / "config.yaml", "yaml"), f"{at}.hydra/config.yaml")
    refs += _refs_of_lines(_read(folder / ".hydra" / "overrides.yaml", "lines"), f"{at}.hydra/overrides.yaml")
    recorded_hydra = _read(folder / ".hydra" / "hydra.yaml", "yaml")
    search = ((recorded_hydra or {}).get("hydra") or {}).get("searchpath") if isinstance(recorded_hydra, dict) else None
    refs += [Ref("config dir", str(s), f"{at}.hydra/hydra.yaml hydra.searchpath") for s in _as_list(search)]
    stored = _read(folder / CONFIG_FILE, "json")
    records.refuse_interpolations(stored, str(folder / CONFIG_FILE))
    return refs + _refs_of_config(stored, f"{at}{CONFIG_FILE}")


def recorded(path: str | Path) -> list[Ref]:
    """Every code reference the directory `path` belongs to records, in every file of every folder a
    command may take it up by (the directory, its checkpoints/ and each checkpoint)."""
    root = trust_root(path)
    _budget["bytes"] = 0
    refs: list[Ref] = []
    for folder in _folders(root):
        refs += _folder_refs(folder, folder.relative_to(root).as_posix() if folder != root else "")
    return refs


def _team_refs(team: Any, at: str = "") -> list[Ref]:
    if not isinstance(team, dict):
        return []
    f = f"{at}{TEAM_FILE}"
    return [Ref("plugin", str(m), f"{f} plugins") for m in _as_list(team.get("plugins"))] + \
        _refs_of_config(team.get("config"), f"{f} config") + _refs_of_lines(team.get("overrides"), f"{f} overrides")


def named_dirs(path: str | Path) -> list[Path]:
    """The directories the records of `path`'s directory name to take up with it (partners,
    diversity members), as they exist here."""
    root = trust_root(path)
    _budget["bytes"] = 0
    values: list[Any] = []
    for folder in _folders(root):
        team = _read(folder / TEAM_FILE, "json")
        configs = [team.get("config")] if isinstance(team, dict) else \
            [_read(folder / ".hydra" / "config.yaml", "yaml"), _read(folder / CONFIG_FILE, "json")]
        for cfg in configs:
            if isinstance(cfg, dict):
                values += [v for k in NAMING_KEYS for v in _as_list(cfg.get(k))]
        lines = _as_list(team.get("overrides")) if isinstance(team, dict) else \
            _as_list(_read(folder / ".hydra" / "overrides.yaml", "lines"))
        for line in lines:
            if isinstance(line, str) and "=" in line and not line.startswith("~") and override_key(line) in NAMING_KEYS:
                values += _values(line)
    out: list[Path] = []
    for v in dict.fromkeys(str(v) for v in values if isinstance(v, str) and v):
        p = trust_root(Path(v).expanduser())
        if p.is_dir() and p.resolve() != root.resolve() and p not in out:
            out.append(p)
        if len(out) > MAX_NAMED_DIRS:
            raise ConfigError(f"{root} names more than {MAX_NAMED_DIRS} directories to take up with it")
    return out


def needs_trust(ref: Ref) -> bool:
    """Whether a reference names code from outside this package (a config directory always does)."""
    return ref.kind == "config dir" or not (ref.module == "magrpo" or str(ref.module).startswith("magrpo."))


def check_refs(root: Path, refs: list[Ref]) -> None:
    """Every reference well formed and bounded, before anything is decided or imported."""
    if len(refs) > MAX_REFS:
        raise ConfigError(f"{root} records {len(refs)} code references (plugins, reward functions, config "
                          f"directories); at most {MAX_REFS} are taken up")
    for ref in refs:
        if ref.kind == "config dir":
            if len(ref.value) > 4096 or "\n" in ref.value or "\0" in ref.value:
                raise ConfigError(f"{root}: {ref} is not a config directory")
            if "${" in ref.value:
                raise RecordError(f"{root}: {ref} holds an interpolation; a record's values are data and never "
                                  f"resolve here")
            continue
        if ref.kind == "reward" and (ref.value.count(":") != 1 or "${" in ref.value):
            raise ConfigError(f"{root}: {ref} is not module:function (a recorded reference is a plain name, never "
                              f"an interpolation)")
        check_name(ref.module, f"{root}: {ref}")


# -- the folder that holds a received directory is not code ---------------------------------------------


def check_sys_path(root: Path) -> None:
    """Refuse to take up a directory you did not make while a `sys.path` entry (`''` and `.` are the
    working directory) is the directory, lies inside it, or is the folder that holds it: whatever
    came with it (a module, a `hydra_plugins/` package, a `*.dist-info` declaring an entry point)
    would be importable here. One line with the fix."""
    inside = forms(root)
    holders = {f.parent for f in inside}
    for entry in sys.path:
        here = forms(entry or ".")
        if any(h == r or h.is_relative_to(r) for h in here for r in inside) or here & holders:
            shown_entry = entry if entry not in ("", ".") else f"{entry!r} (the working directory)"
            ran = [n for n in ("sitecustomize.py", "usercustomize.py") for f in here if (f / n).is_file()]
            hook = (f"; its {ran[0]} was imported by Python itself when this process started, before magrpo could "
                    f"look: remove it") if ran else ""
            raise UntrustedError(f"{root} is not yours (not made by you) and the folder {shown_entry} on sys.path "
                                 f"{'holds it' if here & holders else 'is inside it'}: what came with it would be "
                                 f"importable here, so it is not taken up. Keep received directories in a folder of "
                                 f"their own that is not on sys.path (e.g. move it to teams/), and put only your own "
                                 f"modules' folder on PYTHONPATH (run from another folder when it is the working "
                                 f"directory){hook}")


# -- the decision -------------------------------------------------------------------------------------

_allowed: dict[str, str] = {}       # code -> how it was allowed in this command or call (the strongest)
_OUTSIDE_A_COMMAND: dict[str, Any] = {"flag": False, "hint": "trust_plugins=True", "said": set(), "dirs": None}
_command: dict[str, Any] = dict(_OUTSIDE_A_COMMAND)


def on_this_command(trust_plugins: bool, hint: str, said: Iterable[str] = (),
                    dirs: Iterable[str | Path] | None = ()) -> None:
    """What the command line says (its entry point calls this): `trust_plugins` given, how the
    refusal's line words the one-command trust (`trust_plugins=true`, `--trust-plugins`), the
    caller-only keys it sets itself (`said`: trust_remote_code, isolation), and the directories it
    names itself (`dirs`), which alone the flag covers (a directory inside one, or holding one,
    counts). It holds until the command returns (`one_command`)."""
    _command.update(flag=bool(trust_plugins), hint=hint, said=set(said),
                    dirs=None if dirs is None else [Path(str(d)).expanduser() for d in dirs])


def named_on_this_command(dirs: Iterable[str | Path]) -> None:
    """More directories the command names itself (a hub team once downloaded, a source resolved)."""
    if _command.get("dirs") is not None:
        _command["dirs"] = [*_command["dirs"], *(Path(str(d)).expanduser() for d in dirs)]


def _named_by_command(root: Path) -> bool:
    dirs = _command.get("dirs") or []
    places = forms(root)
    for d in dirs:
        for f in forms(d):
            if any(p == f or p.is_relative_to(f) or f.is_relative_to(p) for p in places):
                return True
    return False


@contextmanager
def scope() -> Iterator[None]:
    """What a command or a Python call allows (its trust flag's reach, what it took up) ends with it:
    the allowances before it are put back when it returns, however it returns."""
    allowed, command = dict(_allowed), dict(_command)
    try:
        yield
    finally:
        _allowed.clear()
        _allowed.update(allowed)
        _command.clear()
        _command.update(command)


def one_command(main: Callable[..., Any]) -> Callable[..., Any]:
    """An entry point's main: what its command line said about trust ends with it, however it ends.
    A command run from Python (a notebook, a test, a population's members) leaves no
    `--trust-plugins` and no allowance behind for the Team or Experiment calls that follow it."""
    @functools.wraps(main)
    def run(*args: Any, **kwargs: Any) -> Any:
        with scope():
            _command.clear()
            _command.update(_OUTSIDE_A_COMMAND)
            return main(*args, **kwargs)
    return run


def one_call(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A Python entry (Team.from_pretrained, Team.from_run): its `trust_plugins=True` covers the
    directory it names, for as long as it runs."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        with scope():
            return fn(*args, **kwargs)
    return run


def _allow(code: str, how: str) -> None:
    if code not in _allowed or _RANK[how] < _RANK[_allowed[code]]:
        _allowed[code] = how


def allow_named(modules: Iterable[str]) -> None:
    """Modules the user named (their command line or call): theirs wherever they are recorded."""
    for m in modules:
        _allow(f"module:{m}", NAMED)


def _listing(refs: list[Ref], limit: int = 4) -> str:
    """Distinct references in words, and the files that record them."""
    names = list(dict.fromkeys(r.name for r in refs))
    files = list(dict.fromkeys(r.file.partition(" ")[0].rstrip(":") for r in refs))
    text = ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
    return f"{text} (in {', '.join(files[:3])}{f' and {len(files) - 3} more files' if len(files) > 3 else ''})"


def refusal(root: Path, refs: list[Ref], untrusted: set[str], why: str, hint: str | None) -> UntrustedError:
    listed = _listing([r for r in refs if r.code in untrusted])
    other = f" (or {hint} on this command)" if hint else ""
    return UntrustedError(f"{root} records code that would run here and is not trusted: {listed}; {why}, so "
                          f"nothing was imported. If you trust it: magrpo-trust {shlex.quote(str(root))}{other}")


def _named_modules(root: Path) -> set[str]:
    """The modules you name (module docstring), less an entry point that lies inside or beside
    `root`: a `*.dist-info` that came with a download names nothing for you."""
    named = set(named_by_user(installed=False))
    for module, place in entry_point_places():
        if place is None or not within_or_beside(place, root):
            named.add(module)
    return {f"module:{m}" for m in named}


def _decide(root: Path, refs: list[Ref], flag: bool) -> tuple[dict[str, str], set[str], str]:
    """How each code `refs` names is allowed (module docstring), the codes that are not, and why
    not in words. The signature and the store are read only when a code is not yours by name."""
    named = _named_modules(root)
    how: dict[str, str] = {}
    untrusted: set[str] = set()
    sig: Signature | None = None
    store: set[str] = set()
    for code in dict.fromkeys(r.code for r in refs if needs_trust(r)):
        if code in named or _allowed.get(code) == NAMED:
            how[code] = NAMED
            continue
        if sig is None:
            sig = signature(root)
            store = stored(root)
        if sig.valid and code in sig.codes:
            how[code] = SIGNED
        elif code in store:
            how[code] = STORED
        elif flag:
            how[code] = FLAG
        else:
            untrusted.add(code)
    return how, untrusted, sig.why if sig is not None else ""


@dataclass
class TakeUp:
    """What a directory's take-up allowed: its root, its references, how each code was allowed, and
    whether the directory is yours whole (its reach keys are taken up: magrpo.core.key_classes)."""

    root: Path
    refs: list[Ref]
    how: dict[str, str]
    own: bool = False

    @property
    def config_dirs(self) -> list[str]:
        return list(dict.fromkeys(r.value for r in self.refs if r.kind == "config dir"))


def take_up(path: str | Path, trust_plugins: bool | None = None, hint: str | None = None) -> TakeUp:
    """Check what the directory `path` belongs to records against the rule (module docstring) and,
    when all of it is trusted, import its plugins and reward modules (magrpo.core.plugins, guarded);
    else an UntrustedError before anything is imported. `trust_plugins`: the call's own say for
    this directory (None: the command line's, for the directories it names)."""
    root = trust_root(path)
    own = made_by_you(root)
    if not own:
        check_sys_path(root)
    refs = recorded(root)
    check_refs(root, refs)
    if trust_plugins is None:
        flag = bool(_command["flag"]) and (_command.get("dirs") is None or _named_by_command(root))
    else:
        flag = bool(trust_plugins)
    how, untrusted, why = _decide(root, refs, flag)
    if untrusted:
        raise refusal(root, refs, untrusted, why, hint or _command["hint"])
    if own:
        _check_named_dirs(root)
    for code, h in how.items():
        _allow(code, h)
    for ref in refs:
        if ref.kind == "config dir":
            _check_config_dir(root, ref, how.get(ref.code, NAMED))
    plugins = {r.module for r in refs if r.kind == "plugin"}
    for ref in refs:
        if ref.module is None or not needs_trust(ref):
            continue
        h = how[ref.code]
        import_plugin(ref.module, f"recorded by {root}, {ref.file}; {h}", root=root if h != NAMED else None,
                      beside=h != NAMED, plugin=ref.module in plugins)
    return TakeUp(root, refs, how, own)


def _check_named_dirs(root: Path) -> None:
    """The directories your record names (its partners, its diversity members) are taken up with it:
    each one's code must be yours or trusted by its own say (its signature, magrpo-trust), never by
    this command's flag, which covers only what it names itself."""
    for d in named_dirs(root):
        refs = recorded(d)
        check_refs(d, refs)
        how, untrusted, why = _decide(d, refs, flag=False)
        if untrusted:
            listed = _listing([r for r in refs if r.code in untrusted])
            raise UntrustedError(f"{root} names {d} (partners or diversity) to take up with it, and {d} records code "
                                 f"that would run here and is not trusted: {listed}; {why}, so nothing was imported. "
                                 f"A directory a record names needs its own say: magrpo-trust {shlex.quote(str(d))}")


def _check_config_dir(root: Path, ref: Ref, how: str) -> None:
    """A recorded config directory never lies inside the directory or beside it (its YAML would come
    along with it); a `pkg://` one names a package that is checked as a plugin is, and found
    without running it."""
    scheme, sep, rest = ref.value.partition("://")
    if not sep:                                     # Hydra reads a path without a scheme as a file path
        scheme, rest = "file", ref.value
    if scheme == "pkg":
        module = check_name(rest.strip("/").replace("/", "."), f"{root}: {ref}")
        if how != NAMED:
            check_location(module, locate(module, f"{root}: {ref}"), root, True, f"{root}: {ref}")
    elif scheme == "file" and how != NAMED:
        if any(f.is_relative_to(r) for f in forms(rest) for r in forms(root)):
            raise ConfigError(f"{root}: {ref} lies inside it; a run or team never brings config along")
        if how not in OWN and within_or_beside(rest, root):     # trusted, not made by you: a download's own
            raise ConfigError(f"{root}: {ref} lies beside it (in the folder that holds it); a run or team never "
                              f"brings config along")


# -- signing what you make ----------------------------------------------------------------------------------


def own_codes(codes: Iterable[str], took_up: bool) -> list[str]:
    """Of `codes` (what a run or team being written records), those that are yours to sign: allowed
    as yours (named by you, or made by you), never one allowed by trusting someone else's directory
    (magrpo-trust, trust_plugins); one never seen in this process is yours only when what is being
    written took up no directory (`took_up`: a run configured from Python, or from your command
    line alone)."""
    fallback = "" if took_up else NAMED
    named = {f"module:{m}" for m in named_by_user()}
    return [c for c in dict.fromkeys(codes) if c in named or _allowed.get(c, fallback) in OWN]


def check_composed(cfg: DictConfig, where: str, caller_keys: bool = True) -> None:
    """The config a command composed after taking up a run or team (or a team's or checkpoint's own
    config), resolved: every module it names (plugins, reward functions, whatever an interpolation
    made of them) allowed by the trust rule, and (`caller_keys`) `trust_remote_code` and a sandbox
    isolation level other than auto set by the user's own command line alone. A ConfigError line
    otherwise, before anything is imported. The entry points call it when their command line took
    a run or team up; magrpo.team.team for every team's or checkpoint's config."""
    try:
        data = as_data(cfg)     # the composed node, resolved here
    except Exception:      # noqa: BLE001  (an interpolation that does not resolve: refused here, its text unsaid)
        raise ConfigError(f"{where}: an interpolation in it cannot be resolved") from None
    refs = _refs_of_config(data, where)
    check_refs(Path(where), refs)
    named = {f"module:{m}" for m in named_by_user()}
    bad = [r for r in refs if needs_trust(r) and r.code not in named and r.code not in _allowed]
    if bad:
        names = ", ".join(dict.fromkeys(r.name for r in bad))
        raise UntrustedError(f"{where} names code the run or team it took up does not record as such: {names}; "
                             f"nothing was imported (a recorded reference is a plain name, never made by an "
                             f"interpolation)")
    if not caller_keys or not isinstance(data, dict):
        return
    said = _command.get("said", set())
    models = (data.get("agents") or {}).get("models") or []
    trusting = [k for k, m in enumerate(models) if isinstance(m, dict) and m.get("trust_remote_code")]
    if trusting and "trust_remote_code" not in said:
        raise UntrustedError(f"{where}: agents.models[{trusting[0]}].trust_remote_code is true, but not by your "
                             f"command line; a run or team you take up never trusts code shipped with a model "
                             f"for you (give ++agents.models.{trusting[0]}.trust_remote_code=true yourself)")
    level = (data.get("sandbox") or {}).get("isolation", "auto")
    if level != "auto" and "isolation" not in said:
        raise UntrustedError(f"{where}: sandbox.isolation is {shown(level)}, but not by your command line; a run "
                             f"or team you take up never chooses how model-written code is confined here (give "
                             f"sandbox.isolation={level} yourself, or leave it at auto)")


def config_codes(cfg: DataclassInstance, search: Iterable[str] = ()) -> list[str]:
    """The references a run's validated config makes (its plugins, reward modules) and its config
    directories."""
    data = as_data(cfg)
    refs = _refs_of_config(data, "config") + [Ref("config dir", str(s), "searchpath") for s in search]
    return [r.code for r in refs if needs_trust(r)]


def sign_run(run_dir: Path, cfg: DataclassInstance, took_up: bool = False) -> None:
    """Sign a run directory as made by you (magrpo-train and magrpo-eval, at start): its place, its
    `.hydra/` records, the checkpoints an earlier signature of yours covered (a resume in place),
    and its config's references (`took_up`: its command line took a run or team up, so only what
    was allowed as yours) with what that earlier signature covered."""
    search: list[str] = []
    try:
        from hydra.core.hydra_config import HydraConfig  # noqa: PLC0415  start-up: Hydra loads only inside a Hydra command

        if HydraConfig.initialized():
            search = [str(s) for s in (HydraConfig.get().searchpath or [])]
    except Exception:       # noqa: BLE001  (no Hydra: a run started from Python)
        search = []
    earlier = signature(run_dir, check_files=False)
    kept = [n for n, d in earlier.files.items() if n.endswith(f"/{MANIFEST}") and _sha256(Path(run_dir) / n) == d] \
        if earlier.valid else []
    reach = not _command.get("received") and (earlier.reach or not kept)
    try:
        write_signature(run_dir, [*own_codes(config_codes(cfg, search), took_up), *earlier.codes],
                        [n for n in RUN_RECORDS if (Path(run_dir) / n).is_file()] + kept, reach=reach)
    except OSError as e:
        log.warning("could not sign %s (%s): later commands will ask you to trust it", run_dir, e)


def sign_checkpoint(run_dir: Path, ckpt: Path, manifest: Path | None = None) -> None:
    """Extend a run's signature to a checkpoint it writes (its manifest, which lists every file), as
    the checkpoint's last step before it is renamed into place (`manifest`: where it is now; a
    checkpoint that appears is covered already, whenever the run is stopped); a run whose signature
    is not yours (a received one resumed in place) stays unsigned for it."""
    sig = signature(run_dir, check_files=False)
    if not sig.valid:
        return
    name = Path(ckpt).resolve().relative_to(Path(run_dir).resolve()).as_posix() + f"/{MANIFEST}"
    digest = _sha256(manifest if manifest is not None else Path(run_dir) / name)
    files = {n: d for n, d in sig.files.items() if (Path(run_dir) / n).is_file() and n != name}
    if digest is not None:
        files[name] = digest
    try:
        _write_signature(run_dir, _place(run_dir), sig.codes, files, sig.reach)
    except OSError as e:
        log.warning("could not sign the checkpoint %s (%s): later commands will ask you to trust it", ckpt, e)


def sign_team(folder: Path, place: Path, info: dict[str, Any], allowed: dict[str, str] | None,
              reach: bool = True) -> None:
    """Sign a team being exported (`info`: its team.json) into `folder`, its manifest written, bound
    to `place`, where it is renamed to. `allowed`: how the code of the directory the team was
    loaded from was allowed (TakeUp.how); only what was yours is signed (None: a team configured
    here, whose code is yours). `reach`: its config's reach keys are yours (the team was loaded
    from a directory you made, or configured here)."""
    codes = [r.code for r in _team_refs(info) if needs_trust(r)]
    if allowed is None:
        mine = own_codes(codes, took_up=False)
    else:
        named = {f"module:{m}" for m in named_by_user()}
        mine = [c for c in dict.fromkeys(codes) if c in named or allowed.get(c) in OWN or _allowed.get(c) == NAMED]
    write_signature(folder, mine, [MANIFEST], place=Path(place).resolve(), reach=reach)


# -- magrpo-trust --------------------------------------------------------------------------------------


def describe(path: str | Path) -> list[str]:
    """Lines: what `path` records and, for each, whether it is trusted here and how."""
    root = trust_root(path)
    refs = recorded(root)
    check_refs(root, refs)
    how, _, why = _decide(root, refs, flag=False)
    lines = []
    for r in {(r.kind, r.value): r for r in refs}.values():
        state = how.get(r.code, f"NOT trusted ({why})") if needs_trust(r) else "built in (needs no trust)"
        files = ", ".join(dict.fromkeys(x.file for x in refs if (x.kind, x.value) == (r.kind, r.value)))
        lines.append(f"  {r.name}: {state} (in {files})")
    lines = lines or ["  no code references: nothing to trust"]
    if made_by_you(root):
        lines.append("  made by you: its reach keys (where data goes, what is read) are taken up")
    else:
        lines.append("  not made by you: its reach keys (URLs, paths, model and data locations) are skipped when "
                     "it is taken up; give them yourself")
    return lines


def trust(path: str | Path) -> list[Ref]:
    """Record that you trust what `path` records now (magrpo-trust DIR)."""
    root = trust_root(path)
    if not root.is_dir():
        raise ConfigError(f"{path}: no such directory")
    refs = recorded(root)
    check_refs(root, refs)
    key = _secret(create=True)
    if key is None:
        raise ConfigError(f"cannot write your trust store under {home()}")
    codes = sorted({r.code for r in refs if needs_trust(r)})
    data = _store()
    where = _place(root)
    data["dirs"][where] = {"code": codes, "hmac": _store_mac(key, [where, *codes])}
    _save_store(data)
    return refs


def adopt(path: str | Path) -> list[Ref]:
    """Sign the directory `path` belongs to as made by you, where it is now (magrpo-trust --adopt):
    a run or team you made and moved, or made before signatures bound the whole directory. A team
    is checked against its manifest first."""
    root = trust_root(path)
    if not root.is_dir():
        raise ConfigError(f"{path}: no such directory")
    refs = recorded(root)
    check_refs(root, refs)
    if (root / TEAM_FILE).is_file():
        verify(root, (TEAM_FILE,), "team")
    if _secret(create=True) is None:
        raise ConfigError(f"cannot write your signing key under {home()}")
    write_signature(root, [r.code for r in refs if needs_trust(r)])
    return refs


def revoke(path: str | Path) -> bool:
    data = _store()
    found = data["dirs"].pop(_place(trust_root(path)), None) is not None
    if found:
        _save_store(data)
    return found


def trusted_dirs() -> dict[str, list[str]]:
    """The directories you trust (`magrpo-trust --list`), each with the code references trusted in it."""
    return {where: list(entry.get("code") or []) for where, entry in sorted(_store()["dirs"].items())}


if __name__ == "__main__":      # the command's options live with the other commands (magrpo.cli)
    raise SystemExit("python -m magrpo.core.trust is now magrpo-trust (python -m magrpo.cli.trust); nothing was changed")
