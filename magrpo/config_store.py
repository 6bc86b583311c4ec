"""Hydra's config store, filled from the schema dataclasses (magrpo.config) and the registries:
every config node's defaults live in one dataclass, and `group=NAME` works for a registered entry
(a plugin's too) that has no YAML of its own.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore

from magrpo import key_classes
from magrpo.algos import ALGOS
from magrpo.config import CONF_DIR, ENTRY_KEYS, GROUP_SCHEMAS, defaults_of, entry_defaults
from magrpo.feedback import FEEDBACKS
from magrpo.plugins import conf_dirs
from magrpo.tasks import TASKS, RewardConfig, reward_schema_of


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


def register_schemas() -> None:
    """Give Hydra every config node's defaults, from its schema dataclass, as `schema/<group>/<name>`.
    Every entry point calls it first (launch.cli_main), and so must code that composes `conf/` with
    Hydra's compose API (the tests' conftest does); calling it again stores only what is new.

    Each option under conf/<group>/ starts from them (`defaults: [/schema/<group>@_here_: <name>]`,
    e.g. conf/algo/magrpo.yaml) and holds only what differs, so the dataclass stays the one source of
    defaults while `group.KEY=VALUE` overrides work on the command line; conf/train.yaml and
    conf/eval.yaml start from `schema/entry` the same way. Stored untyped: values are checked by
    `validate`, whose messages name the key, the value and what is allowed.
    """
    share_config_store()
    store = ConfigStore.instance()
    # What the nodes are made from: the registries (a plugin imported since adds entries) and the
    # conf directories (an entry with a YAML of its own is not offered from its schema). The same as
    # last time and still in the store: there is nothing to register again (a command run in this
    # process before, a test, Experiment.run).
    made_from = (tuple((n, c) for n, c in ALGOS.items()), tuple(FEEDBACKS.items()),
                 tuple((n, c, reward_schema_of(c)) for n, c in TASKS.items()), tuple(conf_dirs()))
    if _registered.get("from") != made_from or "schema" not in store.repo:
        for entry in ENTRY_KEYS:
            store.store(group="schema/entry", name=entry, node=entry_defaults(entry))
        for group, schema in GROUP_SCHEMAS.items():
            store.store(group=f"schema/{group}", name="default", node=defaults_of(schema))
        for name, cls in ALGOS.items():
            node = {**defaults_of(cls.config_schema), "name": name}
            store.store(group="schema/algo", name=name, node=node)
            _offer(store, "algo", name, node)         # algo=NAME works without a conf/algo/NAME.yaml (a plugin's)
        for name, cls in FEEDBACKS.items():   # the same for conf/feedback/<mode>.yaml
            node = {**defaults_of(cls.config_schema), "mode": name}
            store.store(group="schema/feedback", name=name, node=node)
            _offer(store, "feedback", name, node)
        # The keys every task's reward node has (reward.fn, fns, weights, max: magrpo.rewards), under
        # whichever conf/reward/<task>.yaml the run picks (a plugin's too, if it does not start from its
        # schema/reward/<task>): train.yaml and eval.yaml compose it first.
        store.store(group="schema/reward_functions", name="default", node=defaults_of(RewardConfig))
        for name, cls in TASKS.items():        # task=NAME from its schema dataclasses alone (a plugin's task)
            task = {"name": name, **(defaults_of(cls.config_schema) if cls.config_schema else {})}
            task["name"] = name               # first, and the registered name (coophumaneval shares humaneval's schema)
            reward_schema = reward_schema_of(cls)
            reward = defaults_of(reward_schema) if reward_schema else {}
            if "name" in reward:
                reward["name"] = name
            store.store(group="schema/task", name=name, node=task)
            store.store(group="schema/reward", name=name, node=reward)
            _offer(store, "task", name, task)
            _offer(store, "reward", name, reward)
        _declare_key_classes()
        _registered["from"] = made_from


_registered: dict[str, Any] = {}     # what register_schemas last stored nodes from


def _declare_key_classes() -> None:
    """The classes a plugin's schema declares for its own keys (`option(key_class=...)`), for the
    trust rule's table (magrpo.key_classes)."""
    def walk(schema: Any, prefix: str) -> None:
        for f in dataclasses.fields(schema):
            if (f.metadata or {}).get("key_class"):
                key_classes.declare(f"{prefix}{f.name}", f.metadata["key_class"])
            sub = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if dataclasses.is_dataclass(sub):
                walk(type(sub), f"{prefix}{f.name}.")

    for group, registry in (("algo", ALGOS), ("feedback", FEEDBACKS)):
        for cls in registry.values():
            walk(cls.config_schema, f"{group}.")
    for cls in TASKS.values():
        if cls.config_schema is not None:
            walk(cls.config_schema, "task.")
        if (reward := reward_schema_of(cls)) is not None:
            walk(reward, "reward.")


def _offer(store: Any, group: str, name: str, node: dict) -> None:
    """`group=name` for a registered entry that has no YAML in conf/ or in a plugin's conf directory:
    its schema's defaults are the option."""
    if any((Path(d) / group / f"{name}.yaml").is_file() for d in [CONF_DIR, *conf_dirs()]):
        return
    store.store(group=group, name=name, node=node)
