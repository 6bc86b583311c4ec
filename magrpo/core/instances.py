"""A validated config as instances of its schemas, and back to plain data.

`instance(node, Schema)` turns a typed config node (or plain data) into an instance of the
dataclass schema, its nested schemas instances too: what `validate` hands down (RunConfig), so
that code below the entry points reads attributes the schemas declare. `as_data(cfg)` is the
inverse, what a run writes to config.json, W&B and team.json; `select(cfg, "a.b.0.c")` reads a
dotted key of either form.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar

from omegaconf import OmegaConf

from magrpo.core.schema import ConfigError, nested_schema

if TYPE_CHECKING:       # what the type checker knows a dataclass by (typeshed's, no module at run time)
    from _typeshed import DataclassInstance

S = TypeVar("S", bound="DataclassInstance")


def instance(node: Any, schema: type[S], types: Mapping[str, type] | None = None) -> S:
    """`node` (a typed config node, or plain data) as an instance of the dataclass `schema`, its
    nested schemas (fields typed with a dataclass, or a list of them) instances too; `types` gives
    a field the schema of the option a run chose (`algo`: MAGRPOConfig). A key the schema does not
    declare (a free-form node of a plugin's task) is kept as an attribute of the instance."""
    hints = typing.get_type_hints(schema)
    data = _plain(node)
    if not isinstance(data, dict):
        raise ConfigError(f"{schema.__name__}: {data!r} is not a config node")
    declared = {f.name for f in dataclasses.fields(schema) if f.init}
    values = {}
    for name in declared & set(data):
        value = data[name]
        sub = (types or {}).get(name)
        nested, is_list = (sub, False) if sub is not None else nested_schema(hints.get(name))
        if nested is not None and value is not None and not (is_list and not isinstance(value, list)):
            value = [instance(v, nested) for v in value] if is_list else instance(value, nested)
        values[name] = value
    obj = schema(**values)
    for name in set(data) - declared:
        setattr(obj, name, data[name])
    return obj


def _plain(node: Any) -> Any:
    """A config node as plain data, enums and schema instances kept (never resolved again)."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return {**{f.name: getattr(node, f.name) for f in dataclasses.fields(node)}, **_extras(node)}
    if OmegaConf.is_config(node):
        return OmegaConf.to_container(node, resolve=True, enum_to_str=False)
    return node


def _extras(obj: Any) -> dict[str, Any]:
    """The keys a schema instance holds beyond its fields (a free-form node's)."""
    names = {f.name for f in dataclasses.fields(obj)}
    return {k: v for k, v in vars(obj).items() if k not in names and not k.startswith("_")}


def as_data(obj: Any) -> Any:
    """A config (schema instances, a config node, or plain data) as plain data: dicts, lists,
    strings, numbers, enums as their values; what a run writes to config.json, W&B and team.json."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        out = {f.name: as_data(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        out.update({k: as_data(v) for k, v in _extras(obj).items()})
        return out
    if isinstance(obj, Mapping):
        return {k: as_data(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [as_data(v) for v in obj]
    if OmegaConf.is_config(obj):
        return as_data(_plain(obj))
    if isinstance(obj, Enum):
        return obj.value
    return obj


def select(obj: Any, key: str, default: Any = None) -> Any:
    """The value at a dotted key (`agents.models.0.name_or_path`) of a config: schema instances,
    mappings or lists; `default` where there is none."""
    node = obj
    for part in key.replace("[", ".").replace("]", "").split("."):
        if isinstance(node, Mapping):
            if part not in node:
                return default
            node = node[part]
        elif isinstance(node, (list, tuple)) and part.isdigit():
            if int(part) >= len(node):
                return default
            node = node[int(part)]
        elif dataclasses.is_dataclass(node) and hasattr(node, part):
            node = getattr(node, part)
        else:
            return default
    return node
