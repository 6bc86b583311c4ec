"""Config schemas that carry their own checks.

Every config node (an algorithm's, a task's, the optimizer's...) is a dataclass. A field made
with `option(...)` states what values it accepts, next to its default, so the one place that
defines a key also defines its range:

    lr: float = option(1e-5, check=lambda v: v > 0, allowed="> 0")
    joint_mode: str = option("aligned", choices=["aligned", "cross"])
    advantage: str = option("mean", choices=lambda: sorted(ADVANTAGES))   # from a registry

`check_values` walks a typed config against its schema and raises `ConfigError` naming the key,
the bad value and what is allowed. Floats must be finite unless a field says otherwise. A schema
may also define `check_node(node, prefix)` (a staticmethod) for checks across the keys of that one
node, such as a band whose lower bound must stay below its upper bound. (Checks across config
groups, e.g. an algorithm that needs a task's per-agent rewards, are not a schema's: they are an
algorithm's classmethod `check_config(cfg, task_cls)`, called by validation.validate.) A subclass that only changes a default
(`min_tokens: int = 128`) keeps the check its parent declared for that field.

A field's `help=` is the key's description: the one the docs' reference tables show
(scripts/docs_tables.py) and a plugin's keys get theirs from. `help_of(schema, name)` reads it along the
MRO, as the checks are read: a subclass that only changes a default, or declares a field with a
help but no checks (`option(128, help=...)`), keeps what its parent declared for that field.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any


class ConfigError(ValueError):
    """A bad configuration value; the message is meant for the user as it is."""


class SetupError(RuntimeError):
    """The run cannot start here: a model, data set, device or sandbox is unavailable. The message
    names what is missing and, where it can, how to provide it."""


class CheckpointError(ConfigError):
    """A checkpoint (or a team's folder) that is damaged, incomplete or holds what it should not; the
    message names the file and what is wrong (magrpo.core.checkpoint, magrpo.models.agents)."""

    def __init__(self, path: Any, why: str, key: str | None = None):
        super().__init__(f"{key}={str(path)!r}: {why}" if key else f"{path}: {why}")
        self.path, self.why = path, why


Choices = Sequence[Any] | Callable[[], Sequence[Any]]


def did_you_mean(bad: Any, allowed: Sequence[Any]) -> str:
    """"; did you mean 'X'?" for the allowed name closest to a misspelt one, else ""."""
    close = difflib.get_close_matches(str(bad), [str(a) for a in allowed], n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


_CHECK_KEYS = ("check", "allowed", "choices", "finite", "key_class")


def option(default: Any = dataclasses.MISSING, *, check: Callable[[Any], bool] | None = None,
           allowed: str = "", choices: Choices | None = None, finite: bool = True,
           default_factory: Callable[[], Any] | None = None, key_class: str | None = None,
           help: str = "") -> Any:
    """A dataclass field with a value check (see the module docstring). `None` always passes
    `check` when the default is None (an optional key left unset). `key_class`: what a plugin's key
    is to a run or team someone else made (magrpo.core.key_classes: inert, code or reach); the package's
    own keys are classified in that module's table. `help`: the key's description (`help_of`).
    A field given none of the checks declares none: its class's parent's, if any, still hold."""
    meta: dict[str, Any] = {}
    if check is not None or allowed or choices is not None or not finite or key_class is not None:
        meta.update(check=check, allowed=allowed, choices=choices, finite=finite, key_class=key_class)
    if help:
        meta["help"] = help
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def positive(default: Any, *, help: str = "", **kw: Any) -> Any:
    return option(default, check=lambda v: v > 0, allowed="> 0", help=help, **kw)


def at_least(lo: float, default: Any, note: str = "", *, help: str = "", **kw: Any) -> Any:
    return option(default, check=lambda v: v >= lo, allowed=f">= {lo:g}{note}", help=help, **kw)


def within(lo: float, hi: float, default: Any, *, lo_open: bool = False, help: str = "", **kw: Any) -> Any:
    ok = (lambda v: lo < v <= hi) if lo_open else (lambda v: lo <= v <= hi)
    return option(default, check=ok, allowed=f"in {'(' if lo_open else '['}{lo:g}, {hi:g}]", help=help, **kw)


def help_of(schema: type, name: str) -> str:
    """The description of key `name` of `schema` (its field's `help=`), from the nearest class in
    the MRO that gave one; "" when none did."""
    for cls in schema.__mro__:
        f = getattr(cls, "__dataclass_fields__", {}).get(name)
        if f is not None and f.metadata.get("help"):
            return f.metadata["help"]
    return ""


def _choices(spec: Choices) -> list[Any]:
    return list(spec() if callable(spec) else spec)


def nested_schema(tp: Any) -> tuple[type | None, bool]:
    """(dataclass type, is_list) when `tp` is a dataclass, an Optional one, or a list of them."""
    origin = typing.get_origin(tp)
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return tp, False
    if origin in (list, Sequence) and args and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
        return args[0], True
    if args and len(args) == 1 and isinstance(args[0], type) and dataclasses.is_dataclass(args[0]):
        return args[0], False
    return None, False


def _metadata(schema: type, name: str) -> Any:
    """The field's checks, from the nearest class in the MRO that declared any (a help alone is not one)."""
    for cls in schema.__mro__:
        f = getattr(cls, "__dataclass_fields__", {}).get(name)
        if f is not None and any(k in f.metadata for k in _CHECK_KEYS):
            return f.metadata
    return {}


def field_value(node: Any, name: str) -> Any:
    """The value of key `name` in a config node or dict (None when it is absent or ???), or of
    attribute `name` of a schema instance."""
    if isinstance(node, Mapping):
        return node[name] if name in node else None
    return getattr(node, name, None)


def check_values(node: Any, schema: type, prefix: str = "") -> None:
    """Raise ConfigError for the first value of `node` that its schema field does not accept."""
    hints = typing.get_type_hints(schema)
    for f in dataclasses.fields(schema):
        key = f"{prefix}{f.name}"
        value = field_value(node, f.name)
        sub, is_list = nested_schema(hints.get(f.name))
        if sub is not None and value is not None:
            for i, child in enumerate(value if is_list else [value]):
                check_values(child, sub, f"{key}[{i}]." if is_list else f"{key}.")
            continue
        meta = _metadata(schema, f.name)
        if isinstance(value, float) and not math.isfinite(value) and meta.get("finite", True):
            raise ConfigError(f"{key}={value!r} is not a finite number")
        if value is None and (f.default is None or meta.get("check") is None):
            continue
        choices = meta.get("choices")
        if choices is not None and value not in (allowed := _choices(choices)):
            raise ConfigError(f"{key}={value!r} is not allowed; choose one of: "
                              f"{', '.join(str(a) for a in allowed)}{did_you_mean(value, allowed)}")
        check = meta.get("check")
        if check is not None and (value is None or not check(value)):
            raise ConfigError(f"{key}={value!r} is out of range; it must be {meta.get('allowed') or 'valid'}")
    # Checks that involve several keys of this one node (an inverted band, min > max) live on the
    # schema itself: a static `check_node(node, prefix)`. Checks across groups (an algorithm that
    # needs a task's per-agent rewards) are the algorithm's classmethod `check_config(cfg, task_cls)`,
    # which validation.validate calls once the whole config is typed.
    cross_check = getattr(schema, "check_node", None)
    if cross_check is not None:
        cross_check(node, prefix)


_BACKSLASHES_BEFORE_INTERPOLATION = re.compile(r"(\\*)\$\{")


def literal(text: str) -> str:
    """`text` as OmegaConf stores a string it must not resolve: each `${` gets an escaping backslash
    (and the backslashes before it are doubled), so `${oc.env:HOME}` stays that text."""
    return _BACKSLASHES_BEFORE_INTERPOLATION.sub(lambda m: m.group(1) * 2 + "\\${", text)


def literal_strings(data: Any) -> Any:
    """Plain data (a resolved config) with every string made `literal`: created again as a config, it
    reads back the same strings, none turned into an interpolation."""
    if isinstance(data, str):
        return literal(data) if "${" in data else data
    if isinstance(data, dict):
        return {k: literal_strings(v) for k, v in data.items()}
    if isinstance(data, list):
        return [literal_strings(v) for v in data]
    return data
