"""Hydra's config store, filled from the schema dataclasses (magrpo.config.schemas) and the registries:
every config node's defaults live in one dataclass, and `group=NAME` works for a registered entry
(a plugin's too) that has no YAML of its own.

The algorithms' schemas live beside their math, whose modules import torch (about 3 s of a
command's start). What they store is plain data, the same until the package's code or conf/
changes: each registration of the package's own entries is kept in `__pycache__/` beside this file
(as Python keeps its byte code), under a fingerprint of the package's source and conf/ files (their
paths, sizes and modification times), and a command whose registries hold nothing else fills the
store from it (`register_schemas(cached=True)`): `--help` and a mistyped key or option answer
without torch. A plugin, a changed file, or a folder that cannot be written: the registries, as before.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore

from magrpo import __version__
from magrpo.config.groups import RewardConfig
from magrpo.config.schemas import CONF_DIR, ENTRY_KEYS, GROUP_SCHEMAS, defaults_of, entry_defaults
from magrpo.core import key_classes
from magrpo.core.plugins import conf_dirs, loaded
from magrpo.rollout.feedback import FEEDBACKS
from magrpo.tasks import TASKS, reward_schema_of

PACKAGE = Path(__file__).resolve().parents[1]       # magrpo/
CACHE_FILE = PACKAGE / "__pycache__" / "config_store.nodes.json"


def share_config_store() -> None:
    """Let Hydra's config repositories share the one ConfigStore instead of copying it.

    Hydra 1.3 builds a CachingConfigRepository for every composition, and for every group `--help`
    lists, by deep-copying its repository, and with it the ConfigStore singleton and every node in it:
    with this package's schema nodes that is ~0.1 s per copy, 25 s of `magrpo-train --help`. The copy
    protects nothing: the store is only read while composing, and `ConfigStore.load` hands out a deep
    copy of the node it loads. Hydra's own later fix (looking the singleton up on every load instead of
    keeping it) leads to the same sharing; this gets it on the 1.3 releases."""
    if "__deepcopy__" not in vars(ConfigStore):
        ConfigStore.__deepcopy__ = lambda self, memo: self   # type: ignore[attr-defined]


def register_schemas(cached: bool = False) -> None:
    """Give Hydra every config node's defaults, from its schema dataclass, as `schema/<group>/<name>`.
    Every entry point calls it first (launch.cli_main), and so must code that composes `conf/` with
    Hydra's compose API (the tests' conftest does); calling it again stores only what is new.

    Each option under conf/<group>/ starts from them (`defaults: [/schema/<group>@_here_: <name>]`,
    e.g. conf/algo/magrpo.yaml) and holds only what differs, so the dataclass stays the one source of
    defaults while `group.KEY=VALUE` overrides work on the command line; conf/train.yaml and
    conf/eval.yaml start from `schema/entry` the same way. Stored untyped: values are checked by
    `validate`, whose messages name the key, the value and what is allowed.

    `cached`: the nodes of the last registration when nothing can have changed them (module
    docstring): no plugin is loaded, the algorithms are not imported yet, and the package's files are
    as they were.
    """
    share_config_store()
    store = ConfigStore.instance()
    if cached and _from_cache(store):
        return
    # start-up: the algorithms' modules import torch: only for a registration that is not cached
    from magrpo.algos import ALGOS  # noqa: PLC0415  start-up: torch loads only where a model does; the store's nodes are cached (module docstring)

    # What the nodes are made from: the registries (a plugin imported since adds entries) and the
    # conf directories (an entry with a YAML of its own is not offered from its schema). The same as
    # last time and still in the store: there is nothing to register again (a command run in this
    # process before, a test, Experiment.run).
    made_from = (tuple((n, c) for n, c in ALGOS.items()), tuple(FEEDBACKS.items()),
                 tuple((n, c, reward_schema_of(c)) for n, c in TASKS.items()), tuple(conf_dirs()))
    if _registered.get("from") != made_from or "schema" not in store.repo:
        nodes: list[tuple[str, str, dict]] = []

        def put(group: str, name: str, node: dict) -> None:
            store.store(group=group, name=name, node=node)
            nodes.append((group, name, node))

        for entry in ENTRY_KEYS:
            put("schema/entry", entry, entry_defaults(entry))
        for group, schema in GROUP_SCHEMAS.items():
            put(f"schema/{group}", "default", defaults_of(schema))
        for name, cls in ALGOS.items():
            node = {**defaults_of(cls.config_schema), "name": name}
            put("schema/algo", name, node)
            _offer(put, "algo", name, node)         # algo=NAME works without a conf/algo/NAME.yaml (a plugin's)
        for name, mode_cls in FEEDBACKS.items():   # the same for conf/feedback/<mode>.yaml
            node = {**defaults_of(mode_cls.config_schema), "mode": name}
            put("schema/feedback", name, node)
            _offer(put, "feedback", name, node)
        # The keys every task's reward node has (reward.fn, fns, weights, max: magrpo.rollout.rewards), under
        # whichever conf/reward/<task>.yaml the run picks (a plugin's too, if it does not start from its
        # schema/reward/<task>): train.yaml and eval.yaml compose it first.
        put("schema/reward_functions", "default", defaults_of(RewardConfig))
        for name, task_cls in TASKS.items():   # task=NAME from its schema dataclasses alone (a plugin's task)
            task = {"name": name, **(defaults_of(task_cls.config_schema) if task_cls.config_schema else {})}
            task["name"] = name               # first, and the registered name (coophumaneval shares humaneval's schema)
            reward_schema = reward_schema_of(task_cls)
            reward = defaults_of(reward_schema) if reward_schema else {}
            if "name" in reward:
                reward["name"] = name
            put("schema/task", name, task)
            put("schema/reward", name, reward)
            _offer(put, "task", name, task)
            _offer(put, "reward", name, reward)
        _declare_key_classes(ALGOS)
        _registered["from"] = made_from
        if not conf_dirs() and all(_own(c) for registry in (ALGOS, FEEDBACKS, TASKS) for c in registry.values()):
            _write_cache(nodes)


def _own(obj: Any) -> bool:
    """Defined in the package (not a plugin's, not a test's)."""
    return str(getattr(obj, "__module__", "") or "").startswith("magrpo.")


def fingerprint() -> str:
    """What the cached nodes are made from: this package's version, the Python version, and every
    source file of the package and YAML file of conf/ by path, size and modification time."""
    h = hashlib.sha256(f"{__version__} {sys.version_info[:2]} {CONF_DIR}".encode())
    for root, pattern in ((PACKAGE, "*.py"), (Path(CONF_DIR), "*.yaml")):
        for f in sorted(root.rglob(pattern)):
            st = f.stat()
            h.update(f"{f.relative_to(root)} {st.st_size} {st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _write_cache(nodes: list[tuple[str, str, dict]]) -> None:
    """Keep a registration of the package's own entries for the next command (module docstring);
    a folder that cannot be written keeps nothing."""
    tmp = CACHE_FILE.with_name(f".{CACHE_FILE.name}.{os.getpid()}.tmp")
    try:
        CACHE_FILE.parent.mkdir(exist_ok=True)
        tmp.write_text(json.dumps({"fingerprint": fingerprint(), "nodes": nodes}))
        tmp.replace(CACHE_FILE)
    except (OSError, TypeError, ValueError):
        tmp.unlink(missing_ok=True)


def _from_cache(store: Any) -> bool:
    """Fill the store from the cached registration when it holds what the registries would give now
    (register_schemas' `cached`); False, storing nothing, when it may not."""
    if _registered.get("from") == CACHE_FILE:
        return True             # filled from it in this process already
    if loaded() or conf_dirs() or "magrpo.algos.base" in sys.modules or "schema" in store.repo:
        return False            # a plugin's entries, or the registries in this process already
    if not all(_own(c) for registry in (FEEDBACKS, TASKS) for c in registry.values()):
        return False
    try:
        data = json.loads(CACHE_FILE.read_text())
        if data.get("fingerprint") != fingerprint():
            return False
        nodes = [(str(group), str(name), node) for group, name, node in data["nodes"]]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return False
    for group, name, node in nodes:
        store.store(group=group, name=name, node=node)
    _registered["from"] = CACHE_FILE         # a registration from the registries stores everything again
    return True


_registered: dict[str, Any] = {}     # what register_schemas last stored nodes from


def _offer(put: Any, group: str, name: str, node: dict) -> None:
    """`group=name` for a registered entry that has no YAML in conf/ or in a plugin's conf directory:
    its schema's defaults are the option."""
    if any((Path(d) / group / f"{name}.yaml").is_file() for d in [CONF_DIR, *conf_dirs()]):
        return
    put(group, name, node)


def _declare_key_classes(algos: Any) -> None:
    """The classes a plugin's schema declares for its own keys (`option(key_class=...)`), for the
    trust rule's table (magrpo.core.key_classes)."""
    def walk(schema: Any, prefix: str) -> None:
        for f in dataclasses.fields(schema):
            if f.metadata.get("key_class"):         # a field's metadata: a mapping, empty when none given
                key_classes.declare(f"{prefix}{f.name}", f.metadata["key_class"])
            sub = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if dataclasses.is_dataclass(sub):
                walk(type(sub), f"{prefix}{f.name}.")

    for group, registry in (("algo", algos), ("feedback", FEEDBACKS)):
        for cls in registry.values():
            walk(cls.config_schema, f"{group}.")
    for cls in TASKS.values():
        if cls.config_schema is not None:
            walk(cls.config_schema, "task.")
        if (reward := reward_schema_of(cls)) is not None:
            walk(reward, "reward.")
