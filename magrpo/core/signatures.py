"""Who made a directory: your signature over it.

`signature.json` is an HMAC-SHA256 keyed by a secret of yours that lives outside the directory
(`$MAGRPO_HOME/secret`, by default `~/.config/magrpo/secret`, made on first use with mode 0600), as
Jupyter signs the notebooks you ran. It binds the whole directory: its place (the resolved path),
the sha256 of the records a command takes it up by (a team's manifest, which lists every file; a
run's `.hydra/` files and each checkpoint's manifest), the code it references, and whether the keys
that choose where data goes are yours. A copy or a move elsewhere, an edited record, a checkpoint
added since is not covered (`made_by_you`). What a signature allows is the trust rule's
(magrpo.core.trust).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from magrpo.core import records
from magrpo.core.checkpoint import CONFIG_FILE, MANIFEST, OVERRIDES_FILE, TEAM_FILE
from magrpo.core.records import RecordError
from magrpo.core.schema import ConfigError

log = logging.getLogger("magrpo")


HOME_ENV = "MAGRPO_HOME"
SECRET_FILE = "secret"
SIGNATURE_FILE = "signature.json"
FORMAT = 2                  # a signature binds the directory's place and records (format 1 bound one file)
MAX_CHECKPOINTS = 10_000
# The records a run directory's signature covers (beside each checkpoint's manifest).
RUN_RECORDS = (".hydra/config.yaml", ".hydra/overrides.yaml", ".hydra/hydra.yaml")


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


def _mac(key: bytes, message: Any) -> str:
    return hmac.new(key, json.dumps(message, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def _sha256(f: Path) -> str | None:
    try:
        return hashlib.sha256(records.read_bytes(f)).hexdigest()
    except RecordError:
        return None


def _place(root: Path) -> str:
    return str(Path(root).resolve())


# -- signatures: the whole directory, bound to its place ------------------------------------------------


@dataclass
class Signature:
    """What a directory's signature.json says, checked: `valid` when it is yours (your key, this
    directory's place, every record it lists unchanged), the code references it covers, the
    records it lists (relative path -> sha256), and in words why it covers nothing when it does not."""

    valid: bool
    codes: set[str] = field(default_factory=set)
    files: dict[str, str] = field(default_factory=dict)
    why: str = ""
    reach: bool = False         # its reach keys are yours (none was taken from a record you did not make)


def _sig_message(place: str, codes: Iterable[str], files: dict[str, str], reach: bool) -> dict:
    return {"format": FORMAT, "dir": place, "code": sorted(set(codes)), "files": dict(sorted(files.items())),
            "reach": bool(reach)}


def signature(root: Path, check_files: bool = True) -> Signature:
    """`root`'s signature, checked (Signature). `check_files=False`: the key and the place only (a
    run's `.hydra/` that Hydra has just rewritten for a resume in place)."""
    root = Path(root)
    f = root / SIGNATURE_FILE
    if not f.is_file():
        return Signature(False, why="it carries no signature of yours (made elsewhere, or before signatures)")
    try:
        data = records.load_json(f, 1 << 20)
        codes, files, mac, place, reach = data["code"], data["files"], data["hmac"], data["dir"], data["reach"]
        if data.get("format") != FORMAT or not isinstance(codes, list) or not isinstance(reach, bool) or \
                not all(isinstance(c, str) for c in codes) or not isinstance(files, dict) or \
                not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()) or \
                not isinstance(mac, str) or not isinstance(place, str):
            raise ValueError("not a signature")
    except (ConfigError, ValueError, KeyError, TypeError):
        return Signature(False, why=f"its {SIGNATURE_FILE} is not a signature of this magrpo's")
    key = _secret(create=False)
    if key is None or not hmac.compare_digest(_mac(key, _sig_message(place, codes, files, reach)), mac):
        return Signature(False, why="its signature is not yours (made by another user or on another machine, or "
                                    "edited)")
    if place != _place(root):
        return Signature(False, why=f"it was signed at another place ({place}): a signature binds the directory "
                                    f"where you made it, and a copy or a move is taken up as received")
    if check_files:
        for name, digest in files.items():
            p = root / name
            if (p.exists() or p.is_symlink()) and _sha256(p) != digest:
                return Signature(False, why=f"its {name} changed since you made it")
    return Signature(True, set(codes), dict(files), "your signature does not cover it (it changed since you made "
                                                    "it, or it was made from a run you trusted but did not make)",
                     reach)


def _write_signature(root: Path, place: str, codes: Iterable[str], files: dict[str, str], reach: bool) -> None:
    key = _secret(create=True)
    if key is None:
        return
    codes = sorted(set(codes))
    message = _sig_message(place, codes, files, reach)
    body = json.dumps({**message, "by": "magrpo", "hmac": _mac(key, message)}, indent=1) + "\n"
    tmp = Path(root) / f".{SIGNATURE_FILE}.tmp"
    tmp.write_text(body)
    os.replace(tmp, Path(root) / SIGNATURE_FILE)


def _record_files(root: Path) -> list[str]:
    """The record files of `root` that a command takes it up by (relative paths), present now."""
    root = Path(root)
    if (root / TEAM_FILE).is_file():
        names = [MANIFEST]
    else:
        names = [n for n in RUN_RECORDS if (root / n).is_file()]
        for folder in _folders(root)[1:]:
            rel = folder.relative_to(root).as_posix()
            names += [f"{rel}/{n}" for n in (MANIFEST, CONFIG_FILE, *RUN_RECORDS, TEAM_FILE, OVERRIDES_FILE)
                      if (folder / n).is_file()]
        names += [n for n in (CONFIG_FILE, OVERRIDES_FILE) if (root / n).is_file()]
    return names


def _covered(root: Path, name: str, sig: Signature, manifests: dict[str, dict]) -> bool:
    """Whether the record `name` of `root` is what you signed: listed in the signature, or listed with
    the same sha256 by a checkpoint manifest that the signature lists."""
    if name in sig.files:
        return True
    folder, _, base = name.rpartition("/")
    manifest = f"{folder}/{MANIFEST}" if folder else MANIFEST
    if manifest not in sig.files:
        return False
    if manifest not in manifests:
        try:
            manifests[manifest] = records.load_json(Path(root) / manifest)
        except ConfigError:
            manifests[manifest] = {}
    listed = (manifests[manifest].get("files") or {}).get(base) if isinstance(manifests[manifest], dict) else None
    return isinstance(listed, dict) and listed.get("sha256") == _sha256(Path(root) / name)


def made_by_you(path: str | Path) -> bool:
    """Whether the directory `path` belongs to is yours whole: your signature, at its place, covering
    every record a command takes it up by. Its reach keys (magrpo.core.key_classes) are taken up only then."""
    root = trust_root(path)
    if not root.is_dir():
        return False
    sig = signature(root)
    if not sig.valid or not sig.reach:
        return False
    manifests: dict[str, dict] = {}
    return all(_covered(root, name, sig, manifests) for name in _record_files(root))


def write_signature(root: Path, codes: Iterable[str], files: Iterable[str] | None = None,
                    place: str | Path | None = None, reach: bool = True) -> None:
    """Sign `codes` as made by you into `root`, bound to its place (`place`: where it will stay, for a
    folder renamed into place after it is sealed) and to the sha256 of its records (`files`: relative
    paths; default every record it holds now). `reach`: its reach keys are yours too (False when a
    value of one was taken from a record you did not make, even one that chose nothing then: a hub
    id may name a local folder where it is used later)."""
    names = list(_record_files(root) if files is None else files)
    digests = {n: d for n in names if (d := _sha256(Path(root) / n)) is not None}
    _write_signature(root, str(place) if place is not None else _place(root), codes, digests, reach)


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


def _folders(root: Path) -> list[Path]:
    """Every folder a command may take `root` up by: itself, its checkpoints/ and each checkpoint."""
    out = [root]
    ckpts = root / "checkpoints"
    if ckpts.is_dir() and not (root / TEAM_FILE).is_file():
        out.append(ckpts)
        for n, step in enumerate(sorted(ckpts.iterdir())):
            if n >= MAX_CHECKPOINTS:
                raise ConfigError(f"{root}: more than {MAX_CHECKPOINTS} checkpoint folders; not taken up")
            if step.is_dir():
                out.append(step)
    return out
