"""What a record's data may set: the keys that choose where data goes or what is read (reach keys,
magrpo.core.key_classes) are taken up only from a directory you made (magrpo.core.signatures); from
any other record each is skipped, said in one line, and the user gives it again. A record's values
never resolve: one that holds an interpolation is refused in one line.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from magrpo.core import key_classes, records
from magrpo.core.overrides import override_key, parse_override
from magrpo.core.plugins import (
    shown,
)
from magrpo.core.records import RecordError
from magrpo.core.signatures import made_by_you
from magrpo.core.trust import _command

log = logging.getLogger("magrpo")



# -- reach keys: taken up only from a directory you made --------------------------------------------------


def _skip_line(where: str, key: str, value: Any) -> None:
    log.warning("%s: not taken up: %s=%s (a record you did not make never chooses where data goes or what is "
                "read here); give it yourself if you want it: %s=...", where, key, shown(value, 60), key)


def taken_lines(root: Path, lines: list[str], where: str, own: bool | None = None,
                options: Callable[[str, str], dict] | None = None) -> list[str]:
    """Of a record's saved override lines, those a command takes up: a line whose value holds an
    interpolation is refused (one line: a record's values never resolve); from a directory you did
    not make (`own`: made_by_you), a line that sets a reach key (or a key of no class) to a value
    that chooses something is skipped, each said in one line, and so is a group pick whose option
    sets one (`options(group, option)`: what the pick sets; feedback=expert sets a reviewer's URL)."""
    own = made_by_you(root) if own is None else own
    if not own:
        _command["received"] = True     # what this command writes is composed from a record you did not make
    out = []
    for line in lines:
        if "${" in line:
            raise RecordError(f"{where}: the saved override {shown(line, 100)} holds an interpolation; a record's "
                              f"values are data and never resolve here: give {override_key(line)} on your command "
                              f"line (it replaces the saved one)")
        if own or line.startswith("~"):
            out.append(line)
            continue
        key = override_key(line)
        try:
            value = parse_override(line).value()
        except Exception:
            value = line.partition("=")[2]
        reach = key_classes.reaching(key, value)
        if not reach and options is not None and key_classes.is_group(key) and isinstance(value, str):
            reach = key_classes.reaching("", options(key, value))
            if reach:
                log.warning("%s: not taken up: %s=%s (its option sets %s=%s, and a record you did not make never "
                            "chooses where data goes or what is read here); pick it yourself if you want it",
                            where, key, value[:60], reach[0][0], shown(reach[0][1], 60))
                continue
        if reach:
            _skip_line(where, *reach[0])
            continue
        out.append(line)
    return out


def taken_config(root: Path, data: dict, where: str, exempt: Iterable[str] = (), own: bool | None = None) -> dict:
    """A record's resolved config as a command takes it up: an interpolation refused (one line);
    from a directory you did not make, every reach key (and key of no class) whose value chooses
    something removed, so the schema's default stands, each said in one line. `exempt`: keys the
    caller sets itself whatever the record says (a team's model folders)."""
    records.refuse_interpolations(data, where)
    own = made_by_you(root) if own is None else own
    if own:
        return data
    out = json.loads(json.dumps(data))
    for key, value in key_classes.reaching("", out, exempt):
        _skip_line(where, key, value)
        _remove(out, key)
    return out


def _remove(data: Any, dotted: str) -> None:
    parts = dotted.split(".")
    node = data
    for p in parts[:-1]:
        node = node[int(p)] if isinstance(node, list) else node.get(p) if isinstance(node, dict) else None
        if node is None:
            return
    if isinstance(node, dict):
        node.pop(parts[-1], None)
    elif isinstance(node, list) and parts[-1].isdigit() and int(parts[-1]) < len(node):
        node[int(parts[-1])] = None
