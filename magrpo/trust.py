"""The trust rule: what a run or team records is data; code that it names runs only on your say.

A run directory, a checkpoint and an exported team record *code references*: the plugins the run
imported (`plugins`), the reward functions it scored with (`reward.fn`/`reward.fns` written
`module:function`) and the extra config directories it composed with (`hydra.searchpath`). A
command that takes one up (`magrpo-eval checkpoint=`/`team=`, `magrpo-train resume=`,
`magrpo-export`, `magrpo-crossplay`, `magrpo-table`, `Team.from_pretrained`, `Team.from_run`)
imports those modules, and composes with those directories, only when each one is

  * named by you: your own `plugins=`/`--plugins`/`reward.fn=`, MAGRPO_PLUGINS, an entry point of
    a package you installed;
  * made by you: the directory carries `signature.json`, an HMAC-SHA256 over its references keyed
    by a secret of yours that lives outside it (`$MAGRPO_HOME/secret`, by default
    `~/.config/magrpo/secret`, made on first use with mode 0600), as Jupyter signs the notebooks
    you ran. `magrpo-train` signs every run it writes and `magrpo-export` every team, and a
    reference added since (an edited config, a saved override) is not covered;
  * trusted by you: `magrpo-trust DIR` (what DIR records now, kept in `$MAGRPO_HOME/trusted.json`,
    as direnv's `allow`), or `trust_plugins=true` / `--trust-plugins` / `trust_plugins=True` on
    this one command or call.

Otherwise the command stops before anything is imported or composed, in one line that lists what
the directory records and the command that trusts it. Trust is not passed on: a run resumed from
a directory trusted by the last rule signs only the references that are yours, so the sender's
need trusting again. Whatever is trusted, a plugin that lies inside the directory is refused, and
of a directory you did not make, one beside it too (magrpo.plugins).

Modules of this package (`magrpo.*`) are installed code and need no trust; a standard-library
module or a package's `__main__` is never taken as a plugin or reward module.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
import os
import secrets
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf

from magrpo.checkpoint import CONFIG_FILE, TEAM_FILE
from magrpo.overrides import override_key, parse_override
from magrpo.plugins import (
    check_location,
    check_name,
    forms,
    import_plugin,
    locate,
    named_by_user,
    shown,
)
from magrpo.schema import ConfigError
from magrpo.source import first_line

log = logging.getLogger("magrpo")

HOME_ENV = "MAGRPO_HOME"
SECRET_FILE = "secret"
STORE_FILE = "trusted.json"
SIGNATURE_FILE = "signature.json"
FORMAT = 1
MAX_REFS = 256              # references one directory may record (its plugins are also capped per list)
MAX_FILE_BYTES = 16 << 20   # a record larger than this is not read for references: it is refused
MAX_CHECKPOINTS = 10_000
MAX_TOTAL_BYTES = 64 << 20  # what one directory's records may add up to
_budget = {"bytes": 0}

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


# -- the per-user secret and store ---------------------------------------------------------------------


def home() -> Path:
    """Where your secret and trust store live: $MAGRPO_HOME, else ~/.config/magrpo."""
    given = os.environ.get(HOME_ENV)
    return Path(given).expanduser() if given else Path.home() / ".config" / "magrpo"


def _secret(create: bool) -> bytes | None:
    """Your signing key (made on first use when `create`); None when it cannot be read or made."""
    f = home() / SECRET_FILE
    try:
        return bytes.fromhex(f.read_text().strip())
    except (OSError, ValueError):
        if not create:
            return None
    try:
        f.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32) + "\n")
    except FileExistsError:
        pass
    except OSError as e:
        log.warning("cannot write your signing key %s (%s): runs and teams made here are not signed, so "
                    "later commands ask you to trust them", f, e)
        return None
    try:
        return bytes.fromhex(f.read_text().strip())
    except (OSError, ValueError):
        return None


def _mac(key: bytes, codes: Iterable[str]) -> str:
    message = json.dumps({"format": FORMAT, "code": sorted(set(codes))}, sort_keys=True).encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def _read_json(f: Path) -> Any:
    return json.loads(_text(f))


def _text(f: Path) -> str:
    """A record's text; one larger than MAX_FILE_BYTES is refused (ValueError), not read."""
    size = f.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ValueError(f"larger than {MAX_FILE_BYTES >> 20} MB")
    _budget["bytes"] += size
    if _budget["bytes"] > MAX_TOTAL_BYTES:
        raise ValueError(f"the directory's records add up to more than {MAX_TOTAL_BYTES >> 20} MB")
    return f.read_text()


def _plain_yaml(text: str) -> Any:
    """YAML as data, refused when it uses anchors or aliases: magrpo never writes them, and an alias
    that repeats a node grows exponentially when a config is built from it."""
    for token in yaml.scan(text):
        if isinstance(token, (yaml.AnchorToken, yaml.AliasToken)):
            raise ValueError("it uses YAML anchors or aliases, which a run's records never hold")
    return yaml.safe_load(text)


def _identity(root: Path) -> str:
    """What binds a signature to its directory: the sha256 of the record a command takes the
    directory up by (a team's team.json, a run's .hydra/overrides.yaml), "" where there is none. A
    signature copied into another directory covers nothing there."""
    for f in (Path(root) / TEAM_FILE, Path(root) / ".hydra" / "overrides.yaml"):
        if f.is_file():
            try:
                return hashlib.sha256(_text(f).encode()).hexdigest()
            except (OSError, ValueError):
                return "unreadable"
    return ""


def signature(root: Path) -> tuple[set[str], str]:
    """The references `root`'s signature covers, and in words why none are when it covers none."""
    f = Path(root) / SIGNATURE_FILE
    if not f.is_file():
        return set(), "it carries no signature of yours (made elsewhere, or before signatures)"
    try:
        data = _read_json(f)
        codes, mac = data["code"], data["hmac"]
        if not isinstance(codes, list) or not all(isinstance(c, str) for c in codes) or not isinstance(mac, str):
            raise ValueError("not a signature")
    except (OSError, ValueError, KeyError, TypeError):
        return set(), f"its {SIGNATURE_FILE} is not a signature"
    key = _secret(create=False)
    if key is None or not hmac.compare_digest(_mac(key, [*codes, f"record:{_identity(root)}"]), mac):
        return set(), ("its signature is not yours (made by another user or on another machine, edited, or "
                       "copied from another directory)")
    return set(codes), ("your signature does not cover it (it changed since you made it, or it was made from "
                        "a run you trusted but did not make)")


def write_signature(root: Path, codes: Iterable[str]) -> None:
    """Sign `codes` as made by you into `root` (a run directory, or an export's folder being filled,
    its record written first: the signature is bound to it)."""
    key = _secret(create=True)
    if key is None:
        return
    codes = sorted(set(codes))
    mac = _mac(key, [*codes, f"record:{_identity(root)}"])
    body = json.dumps({"format": FORMAT, "by": "magrpo", "code": codes, "hmac": mac}, indent=1) + "\n"
    tmp = Path(root) / f".{SIGNATURE_FILE}.tmp"
    tmp.write_text(body)
    os.replace(tmp, Path(root) / SIGNATURE_FILE)


def _store() -> dict[str, Any]:
    try:
        data = _read_json(home() / STORE_FILE)
        return data if isinstance(data, dict) and isinstance(data.get("dirs"), dict) else {"dirs": {}}
    except (OSError, ValueError):
        return {"format": FORMAT, "dirs": {}}


def _save_store(data: dict[str, Any]) -> None:
    f = home() / STORE_FILE
    f.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = f.with_name(f".{STORE_FILE}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps({"format": FORMAT, "dirs": data["dirs"]}, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, f)


def stored(root: Path) -> set[str]:
    """What `magrpo-trust` recorded as trusted for `root` (by its resolved path)."""
    entry = _store()["dirs"].get(str(Path(root).resolve()))
    key = _secret(create=False)
    if not isinstance(entry, dict) or key is None:
        return set()
    codes = entry.get("code")
    if not isinstance(codes, list) or not hmac.compare_digest(_mac(key, [str(Path(root).resolve()), *codes]),
                                                             str(entry.get("hmac", ""))):
        return set()
    return set(codes)


# -- what a directory records -----------------------------------------------------------------------------


def trust_root(path: str | Path) -> Path:
    """The directory a path belongs to for trust: a team, the run a checkpoint is part of
    (`RUN/checkpoints/step_N`, `RUN/checkpoints`), or the path itself."""
    p = Path(str(path)).expanduser()
    if p.name == "checkpoints" and p.parent.is_dir():
        return p.parent
    if p.parent.name == "checkpoints" and p.parent.parent.is_dir():
        return p.parent.parent
    return p


def _values(line: str) -> list[Any]:
    try:
        value = parse_override(line).value()
    except Exception:
        return [line.partition("=")[2]]         # unparsable: its text, refused as a name below
    return value if isinstance(value, list) else [value]


def _refs_of_config(cfg: Any, file: str) -> list[Ref]:
    """The references a config (team.json's `config`, a checkpoint's config.json, .hydra/config.yaml) holds."""
    if not isinstance(cfg, dict):
        return []
    out = [Ref("plugin", str(m), f"{file} plugins") for m in _as_list(cfg.get("plugins"))]
    reward = cfg.get("reward")
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
    if not f.is_file():
        return None
    try:
        if how == "json":
            return _read_json(f)
        return _plain_yaml(_text(f))
    except Exception as e:      # noqa: BLE001  (a broken record of any kind: one line)
        first = first_line(e) or type(e).__name__
        raise ConfigError(f"{f}: cannot be read ({first[:200]}), so what it records cannot be checked") from None


def _folder_refs(folder: Path, where: str) -> list[Ref]:
    """What one folder's records name: a team's team.json and overrides.yaml, a run's .hydra/
    (config, overrides, search path) and a checkpoint's config.json."""
    at = f"{where}/" if where else ""
    team = _read(folder / TEAM_FILE, "json")
    refs = _team_refs(team, at) + _refs_of_lines(_read(folder / "overrides.yaml", "lines"), f"{at}overrides.yaml")
    if team is not None:            # a team is taken up by these two alone (an added .hydra/ is never read)
        return refs
    refs += _refs_of_config(_read(folder / ".hydra" / "config.yaml", "yaml"), f"{at}.hydra/config.yaml")
    refs += _refs_of_lines(_read(folder / ".hydra" / "overrides.yaml", "lines"), f"{at}.hydra/overrides.yaml")
    recorded_hydra = _read(folder / ".hydra" / "hydra.yaml", "yaml")
    search = ((recorded_hydra or {}).get("hydra") or {}).get("searchpath") if isinstance(recorded_hydra, dict) else None
    refs += [Ref("config dir", str(s), f"{at}.hydra/hydra.yaml hydra.searchpath") for s in _as_list(search)]
    return refs + _refs_of_config(_read(folder / CONFIG_FILE, "json"), f"{at}{CONFIG_FILE}")


def recorded(path: str | Path) -> list[Ref]:
    """Every code reference the directory `path` belongs to records, in every file of every folder a
    command may take it up by (the directory, its checkpoints/ and each checkpoint)."""
    root = trust_root(path)
    _budget["bytes"] = 0
    refs = _folder_refs(root, "")
    ckpts = root / "checkpoints"
    if ckpts.is_dir() and not (root / TEAM_FILE).is_file():
        refs += _folder_refs(ckpts, "checkpoints")
        for n, step in enumerate(sorted(ckpts.iterdir())):
            if n >= MAX_CHECKPOINTS:
                raise ConfigError(f"{root}: more than {MAX_CHECKPOINTS} checkpoint folders; not taken up")
            if step.is_dir():
                refs += _folder_refs(step, f"checkpoints/{step.name}")
    return refs


def _team_refs(team: Any, at: str = "") -> list[Ref]:
    if not isinstance(team, dict):
        return []
    f = f"{at}{TEAM_FILE}"
    return [Ref("plugin", str(m), f"{f} plugins") for m in _as_list(team.get("plugins"))] + \
        _refs_of_config(team.get("config"), f"{f} config") + _refs_of_lines(team.get("overrides"), f"{f} overrides")


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
            if len(ref.value) > 4096 or "\n" in ref.value:
                raise ConfigError(f"{root}: {ref} is not a config directory")
            continue
        if ref.kind == "reward" and (ref.value.count(":") != 1 or "${" in ref.value):
            raise ConfigError(f"{root}: {ref} is not module:function (a recorded reference is a plain name, never "
                              f"an interpolation)")
        check_name(ref.module, f"{root}: {ref}")


# -- the decision -------------------------------------------------------------------------------------

_allowed: dict[str, str] = {}       # code -> how it was allowed in this process (the strongest)
_OUTSIDE_A_COMMAND = {"flag": False, "hint": "trust_plugins=True"}     # Python: Team, Experiment
_command: dict[str, Any] = dict(_OUTSIDE_A_COMMAND)


def on_this_command(trust_plugins: bool, hint: str, said: Iterable[str] = ()) -> None:
    """What the command line says (its entry point calls this): `trust_plugins` given, how the
    refusal's line words the one-command trust (`trust_plugins=true`, `--trust-plugins`), and the
    caller-only keys it sets itself (`said`: trust_remote_code, isolation). It holds until the
    command returns (`one_command`)."""
    _command.update(flag=bool(trust_plugins), hint=hint, said=set(said))


def one_command(main: Callable[..., Any]) -> Callable[..., Any]:
    """An entry point's main: what its command line said about trust ends with it, however it ends.
    A command run from Python (a notebook, a test, a population's members) leaves no
    `--trust-plugins` behind for the Team or Experiment calls that follow it."""
    @functools.wraps(main)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return main(*args, **kwargs)
        finally:
            _command.clear()
            _command.update(_OUTSIDE_A_COMMAND)
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


def refusal(root: Path, refs: list[Ref], untrusted: set[str], why: str, hint: str) -> UntrustedError:
    listed = _listing([r for r in refs if r.code in untrusted])
    return UntrustedError(f"{root} records code that would run here and is not trusted: {listed}; {why}, so "
                          f"nothing was imported. If you trust it: magrpo-trust {shlex.quote(str(root))} (or {hint} "
                          f"on this command)")


def _decide(root: Path, refs: list[Ref], flag: bool) -> tuple[dict[str, str], set[str], str]:
    """How each code `refs` names is allowed (module docstring), the codes that are not, and why
    not in words. The signature and the store are read only when a code is not yours by name."""
    named = {f"module:{m}" for m in named_by_user()}
    how: dict[str, str] = {}
    untrusted: set[str] = set()
    signed: set[str] | None = None
    store: set[str] = set()
    why = ""
    for code in dict.fromkeys(r.code for r in refs if needs_trust(r)):
        if code in named or _allowed.get(code) == NAMED:
            how[code] = NAMED
            continue
        if signed is None:
            signed, why = signature(root)
            store = stored(root)
        if code in signed:
            how[code] = SIGNED
        elif code in store:
            how[code] = STORED
        elif flag:
            how[code] = FLAG
        elif code in _allowed:          # allowed earlier by this command (its entry point's check)
            how[code] = _allowed[code]
        else:
            untrusted.add(code)
    return how, untrusted, why


@dataclass
class TakeUp:
    """What a directory's take-up allowed: its root, its references and how each code was allowed."""

    root: Path
    refs: list[Ref]
    how: dict[str, str]

    @property
    def config_dirs(self) -> list[str]:
        return list(dict.fromkeys(r.value for r in self.refs if r.kind == "config dir"))


def take_up(path: str | Path, trust_plugins: bool | None = None, hint: str | None = None) -> TakeUp:
    """Check what the directory `path` belongs to records against the rule (module docstring) and,
    when all of it is trusted, import its plugins and reward modules (magrpo.plugins, guarded);
    else an UntrustedError before anything is imported. `trust_plugins`: the call's own say (None:
    the command line's)."""
    root = trust_root(path)
    refs = recorded(root)
    check_refs(root, refs)
    flag = _command["flag"] if trust_plugins is None else bool(trust_plugins)
    how, untrusted, why = _decide(root, refs, flag)
    if untrusted:
        raise refusal(root, refs, untrusted, why, hint or _command["hint"])
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
                      beside=h not in OWN, plugin=ref.module in plugins)
    return TakeUp(root, refs, how)


def _check_config_dir(root: Path, ref: Ref, how: str) -> None:
    """A recorded config directory never lies inside the directory (its YAML would come along with
    it); a `pkg://` one names a package that is checked as a plugin is, and found without running it."""
    scheme, sep, rest = ref.value.partition("://")
    if not sep:                                     # Hydra reads a path without a scheme as a file path
        scheme, rest = "file", ref.value
    if scheme == "pkg":
        module = check_name(rest.strip("/").replace("/", "."), f"{root}: {ref}")
        if how != NAMED:
            check_location(module, locate(module, f"{root}: {ref}"), root, how not in OWN, f"{root}: {ref}")
    elif scheme == "file" and how != NAMED:
        where = forms(rest)
        if any(f.is_relative_to(r) for f in where for r in forms(root)):
            raise ConfigError(f"{root}: {ref} lies inside it; a run or team never brings config along")


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


def check_composed(cfg: Any, where: str, caller_keys: bool = True) -> None:
    """The config a command composed after taking up a run or team (or a team's or checkpoint's own
    config), resolved: every module it names (plugins, reward functions, whatever an interpolation
    made of them) allowed by the trust rule, and (`caller_keys`) `trust_remote_code` and a sandbox
    isolation level other than auto set by the user's own command line alone. A ConfigError line
    otherwise, before anything is imported. The entry points call it when their command line took
    a run or team up; magrpo.team for every team's or checkpoint's config."""
    try:
        data = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else cfg
    except Exception as e:      # noqa: BLE001  (an interpolation that does not resolve: refused here)
        raise ConfigError(f"{where}: cannot be resolved ({first_line(e)[:200]})") from None
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


def config_codes(cfg: Any, search: Iterable[str] = ()) -> list[str]:
    """The references a run's config makes (its plugins, reward modules) and its config directories."""
    data = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else cfg
    refs = _refs_of_config(data, "config") + [Ref("config dir", str(s), "searchpath") for s in search]
    return [r.code for r in refs if needs_trust(r)]


def sign_run(run_dir: Path, cfg: Any, took_up: bool = False) -> None:
    """Sign a run directory's references as yours (magrpo-train and magrpo-eval, at start): the
    config's own (`took_up`: its command line took a run or team up, so only what was allowed as
    yours), and what its earlier valid signature covered."""
    search: list[str] = []
    try:
        from hydra.core.hydra_config import HydraConfig  # noqa: PLC0415  start-up: Hydra loads only inside a Hydra command

        if HydraConfig.initialized():
            search = [str(s) for s in (HydraConfig.get().searchpath or [])]
    except Exception:       # noqa: BLE001  (no Hydra: a run started from Python)
        search = []
    earlier, _ = signature(run_dir)
    try:
        write_signature(run_dir, [*own_codes(config_codes(cfg, search), took_up), *earlier])
    except OSError as e:
        log.warning("could not sign %s (%s): later commands will ask you to trust it", run_dir, e)


def sign_team(folder: Path, info: dict[str, Any]) -> None:
    """Sign a team being exported (`info`: its team.json) into `folder`, before its manifest."""
    write_signature(folder, own_codes((r.code for r in _team_refs(info) if needs_trust(r)), took_up=True))


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
    return lines or ["  no code references: nothing to trust"]


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
    where = str(root.resolve())
    data["dirs"][where] = {"code": codes, "hmac": _mac(key, [where, *codes])}
    _save_store(data)
    return refs


def revoke(path: str | Path) -> bool:
    data = _store()
    found = data["dirs"].pop(str(trust_root(path).resolve()), None) is not None
    if found:
        _save_store(data)
    return found


def trusted_dirs() -> dict[str, list[str]]:
    """The directories you trust (`magrpo-trust --list`), each with the code references trusted in it."""
    return {where: list(entry.get("code") or []) for where, entry in sorted(_store()["dirs"].items())}


if __name__ == "__main__":      # the command's options moved with the other commands (magrpo.cli)
    raise SystemExit("python -m magrpo.trust is now magrpo-trust (python -m magrpo.cli.trust); nothing was changed")
