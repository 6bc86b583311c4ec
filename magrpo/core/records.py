"""The one reader of the files a run, a checkpoint or a team records.

Every record file a command reads from a directory it did not necessarily make (team.json,
manifest.json, signature.json, a checkpoint's config.json, `.hydra/{config,overrides,hydra}.yaml`,
a team's overrides.yaml, summary.json, eval.json, metrics.jsonl) is read here, as data, with
bounds a hostile sender cannot stretch:

  * a regular file (a FIFO or a device under a record's name would block the read forever), of
    at most `limit` bytes (MAX_FILE_BYTES by default), UTF-8;
  * JSON and YAML parsed as plain data: YAML anchors and aliases refused (a few hundred bytes of
    them grow a billion-fold when a config is built from them; magrpo never writes them), nesting
    at most MAX_DEPTH deep (a deeper one is refused, never a RecursionError);
  * a refusal is one RecordError line (a ConfigError: exit code 2 on the command line) naming the
    file and what is wrong.

A record's values are data and never resolve. `interpolation_in` finds a string that holds an
interpolation (`${...}`); the readers of a *resolved* record (team.json's config, a checkpoint's
config.json, saved override lines) refuse one in a line, so no environment value can reach a log,
a table or an error message. Hydra's own composed config (`.hydra/config.yaml`) is unresolved by
nature: `resolve_own_refs` resolves the references between its own keys (`${algo.temperature}`)
and leaves one that calls a resolver (`${oc.env:TOKEN}`, `${hydra:...}`), or leads to one, as written.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from magrpo.core.schema import ConfigError

MAX_FILE_BYTES = 16 << 20       # one record file (a team.json, a composed config, a manifest)
MAX_LOG_BYTES = 1 << 30         # a run's metrics.jsonl, read line by line
MAX_LINE_BYTES = 1 << 20        # one line of it
MAX_DEPTH = 64                  # nesting of a record's data; magrpo's own are under 10 deep


class RecordError(ConfigError):
    """A record file that cannot be read as data: not a regular file, too large, not UTF-8, not JSON
    or YAML, YAML with anchors or aliases, nested too deep, or holding an interpolation where a
    value must be plain. One line naming the file and why."""


def _shown(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 3]}...' ({len(str(value))} characters)"


def read_bytes(path: str | os.PathLike, limit: int = MAX_FILE_BYTES) -> bytes:
    """A record file's bytes: a regular file of at most `limit` bytes, else a RecordError."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise RecordError(f"{path}: cannot be read ({e.strerror or type(e).__name__})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RecordError(f"{path}: not a regular file; a record is read only from a plain file")
        if st.st_size > limit:
            raise RecordError(f"{path}: {st.st_size} bytes, larger than the {_size(limit)} a record may hold")
        chunks, total = [], 0
        while True:
            block = os.read(fd, 1 << 20)
            if not block:
                break
            total += len(block)
            if total > limit:       # grown since it was looked at
                raise RecordError(f"{path}: larger than the {_size(limit)} a record may hold")
            chunks.append(block)
        return b"".join(chunks)
    except OSError as e:
        raise RecordError(f"{path}: cannot be read ({e.strerror or type(e).__name__})") from None
    finally:
        os.close(fd)


def _size(n: int) -> str:
    return f"{n >> 30} GB" if n >= 1 << 30 else f"{n >> 20} MB" if n >= 1 << 20 else f"{n >> 10} KB"


def read_text(path: str | os.PathLike, limit: int = MAX_FILE_BYTES) -> str:
    """A record file's text (UTF-8), bounded as read_bytes is."""
    try:
        return read_bytes(path, limit).decode("utf-8")
    except UnicodeDecodeError as e:
        raise RecordError(f"{path}: not UTF-8 text (byte {e.start})") from None


def check_depth(data: Any, where: str, limit: int = MAX_DEPTH) -> Any:
    """`data`, refused when its lists and mappings nest deeper than `limit` (walked without recursion),
    or when a string in it (a key or a value) is not UTF-8 text: JSON's escapes can write a lone
    surrogate, which no file, log or terminal can take."""
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            _check_text(node, where)
        elif isinstance(node, (dict, list, tuple)):
            if depth > limit:
                raise RecordError(f"{where}: nested more than {limit} levels deep; a record is never that deep")
            if isinstance(node, dict):
                for k in node:
                    if isinstance(k, str):
                        _check_text(k, where)
            children = node.values() if isinstance(node, dict) else node
            stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list, tuple, str)))
    return data


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise RecordError(f"{where}: holds a string that is not UTF-8 text (a lone surrogate); a record's text "
                          f"always is") from None


def parse_json(text: str, where: str) -> Any:
    """JSON text as data, bounded in depth."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise RecordError(f"{where}: nested too deep to read; a record is never that deep") from None
    except ValueError as e:
        raise RecordError(f"{where}: not JSON ({str(e).splitlines()[0][:160]})") from None
    return check_depth(data, where)


def parse_yaml(text: str, where: str) -> Any:
    """YAML text as plain data: anchors and aliases refused, bounded in depth."""
    try:
        for token in yaml.scan(text):
            if isinstance(token, (yaml.AnchorToken, yaml.AliasToken)):
                raise RecordError(f"{where}: it uses YAML anchors or aliases, which a record never holds (a few "
                                  f"hundred bytes of them grow a billion-fold when read)")
        data = yaml.safe_load(text)
    except RecursionError:
        raise RecordError(f"{where}: nested too deep to read; a record is never that deep") from None
    except yaml.YAMLError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RecordError(f"{where}: not YAML ({first[:160]})") from None
    return check_depth(data, where)


def load_json(path: str | os.PathLike, limit: int = MAX_FILE_BYTES) -> Any:
    """A JSON record file as data (module docstring)."""
    return parse_json(read_text(path, limit), str(path))


def load_yaml(path: str | os.PathLike, limit: int = MAX_FILE_BYTES) -> Any:
    """A YAML record file as plain data (module docstring)."""
    return parse_yaml(read_text(path, limit), str(path))


def iter_jsonl(path: str | os.PathLike, limit: int = MAX_LOG_BYTES) -> Iterator[Any]:
    """The JSON values of a record's lines (metrics.jsonl): a regular file of at most `limit`
    bytes, read line by line; a line that is not JSON (one cut short by a crash), longer than
    MAX_LINE_BYTES or nested too deep is skipped."""
    path = Path(path)
    try:
        st = os.stat(path)
    except OSError as e:
        raise RecordError(f"{path}: cannot be read ({e.strerror or type(e).__name__})") from None
    if not stat.S_ISREG(st.st_mode):
        raise RecordError(f"{path}: not a regular file; a record is read only from a plain file")
    if st.st_size > limit:
        raise RecordError(f"{path}: {st.st_size} bytes, larger than the {_size(limit)} a run's log may hold")
    with open(path, "rb") as f:
        while True:
            line = f.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            if len(line) > MAX_LINE_BYTES:
                while line and not line.endswith(b"\n"):      # the rest of an over-long line
                    line = f.readline(MAX_LINE_BYTES)
                continue
            text = line.strip()
            if not text:
                continue
            try:
                yield parse_json(text.decode("utf-8"), str(path))
            except (RecordError, UnicodeDecodeError):
                continue


# -- interpolations ---------------------------------------------------------------------------------

_RESOLVER_CALL = re.compile(r"\$\{\s*[\w.-]+\s*:")       # ${oc.env:X}, ${hydra:...}: a resolver, not a key
_KEY_REF = re.compile(r"\$\{\s*([A-Za-z_][\w-]*(?:\.[\w-]+|\[\d+\])*)\s*\}")
_MAX_PASSES = 16


def _walk(data: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) of every leaf of `data`."""
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _walk(v, f"{prefix}{k}.")
    elif isinstance(data, (list, tuple)):
        for i, v in enumerate(data):
            yield from _walk(v, f"{prefix}{i}.")
    else:
        yield prefix[:-1], data


def interpolation_in(data: Any) -> tuple[str, str] | None:
    """The first (dotted key, text) of `data` whose string holds an interpolation (`${...}`), keys included."""
    for key, value in _walk(data):
        if isinstance(value, str) and "${" in value:
            return key, value
        if "${" in key:
            return key, key
    return None


def refuse_interpolations(data: Any, where: str) -> Any:
    """`data`, refused in one line when a value holds an interpolation: a resolved record (a team's
    config, a checkpoint's config.json) never does, and one that did would read this machine's
    environment, or another key, when a config is built from it."""
    found = interpolation_in(data)
    if found is not None:
        key, text = found
        raise RecordError(f"{where}: {key or 'a value'} holds the interpolation {_shown(text, 100)}; a record's "
                          f"values are data and never resolve here (give the key yourself)")
    return data


def _lookup(flat: dict[str, Any], ref: str) -> tuple[bool, Any]:
    key = ref.replace("[", ".").replace("]", "")
    if key in flat:
        return True, flat[key]
    return False, None


def _flat(data: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict) and node:
            out[prefix[:-1]] = node if prefix else None
            for k, v in node.items():
                walk(v, f"{prefix}{k}.")
        elif isinstance(node, list) and node:
            out[prefix[:-1]] = node
            for i, v in enumerate(node):
                walk(v, f"{prefix}{i}.")
        elif prefix:
            out[prefix[:-1]] = node
    walk(data, "")
    out.pop("", None)
    return out


MAX_RESOLVED_BYTES = MAX_FILE_BYTES      # what resolving a record's references may add up to


def resolve_own_refs(data: Any) -> Any:
    """A copy of Hydra's composed config `data` (plain data) with each reference to one of its own
    keys (`${algo.temperature}`, `${agents.models.0.name_or_path}`) replaced by that key's value,
    computed here without OmegaConf. A string that calls a resolver (`${oc.env:TOKEN}`,
    `${hydra:runtime.output_dir}`), refers to one that does, or refers to a key it does not hold
    stays as written: text, never this machine's environment. References that would expand past
    MAX_RESOLVED_BYTES (a chain that repeats a long value) are refused in one line."""
    flat = _flat(data)
    budget = {"left": MAX_RESOLVED_BYTES}
    memo: dict[str, tuple[bool, Any]] = {}

    def spend(value: Any) -> Any:
        budget["left"] -= len(value) if isinstance(value, str) else \
            len(json.dumps(value, default=str)) if isinstance(value, (dict, list)) else 8
        if budget["left"] < 0:
            raise RecordError(f"its interpolations expand past {_size(MAX_RESOLVED_BYTES)}; a record's references "
                              f"are never that large")
        return value

    def resolve(text: str, seen: frozenset[str]) -> tuple[bool, Any]:
        if text not in memo:
            memo[text] = _resolve(text, seen)
        return memo[text]

    def _resolve(text: str, seen: frozenset[str]) -> tuple[bool, Any]:
        if _RESOLVER_CALL.search(text):
            return False, text
        whole = _KEY_REF.fullmatch(text.strip())
        refs = _KEY_REF.findall(text)
        if not refs or len(seen) > _MAX_PASSES:
            return False, text
        values = {}
        for ref in dict.fromkeys(refs):
            found, value = _lookup(flat, ref)
            if not found or ref in seen:
                return False, text
            if isinstance(value, str) and "${" in value:
                ok, value = resolve(value, seen | {ref})
                if not ok:
                    return False, text
            values[ref] = value
        if whole:
            return True, spend(values[whole.group(1)])
        for value in values.values():       # the pieces first: a string that would grow past the budget is refused
            spend(value)
        out = spend(_KEY_REF.sub(lambda m: "" if values[m.group(1)] is None else str(values[m.group(1)]), text))
        return ("${" not in out), out

    def rebuild(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: rebuild(v) for k, v in node.items()}
        if isinstance(node, list):
            return [rebuild(v) for v in node]
        if isinstance(node, str) and "${" in node:
            ok, value = resolve(node, frozenset())
            return value if ok else node
        return node
    return rebuild(data)


def select(data: Any, key: str) -> Any:
    """The value at a dotted key of plain data (`a.b.0.c`, `a.b[0].c`); None where there is none."""
    node = data
    for part in key.replace("[", ".").replace("]", "").split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node
