"""The config groups a user picks from, and their options: --help's list (`${magrpo.groups:CONFIG}`
in conf/hydra/help/) and the messages for an option that is none."""

from __future__ import annotations

from pathlib import Path

import yaml
from hydra.core.config_store import ConfigStore

from magrpo.config.schemas import CONF_DIR
from magrpo.core.plugins import conf_dirs

GROUPS_RESOLVER = "magrpo.groups"
INTERNAL_GROUPS = ("hydra", "schema")      # Hydra's own, and the algorithms' and modes' schema defaults
# The groups whose options also come from a registry: each registered entry's schema node is in the
# config store as schema/<group>/<name> (magrpo.validation.store), and composes from it alone.
REGISTERED = ("algo", "task", "reward", "feedback")


def config_groups() -> list[str]:
    """The user-facing config groups under conf/ (not Hydra's own or the internal schema groups)."""
    return sorted(p.name for p in Path(CONF_DIR).iterdir() if p.is_dir() and p.name not in INTERNAL_GROUPS)


def group_options(group: str) -> list[str]:
    """The options of config group `group` (its conf/<group>/*.yaml), [] for a key that is no group."""
    root = Path(CONF_DIR) / group
    return sorted(p.stem for p in root.glob("*.yaml")) if root.is_dir() else []


def all_options(group: str) -> list[str]:
    """A group's options: its YAML (conf/ and the plugins' conf directories; an experiment's nested
    ones as paths) and the registered entries that compose from their schema alone (their nodes in
    the config store, which every command fills first: magrpo.validation.store.register_schemas)."""
    names: set[str] = set()
    for root in [Path(CONF_DIR), *map(Path, conf_dirs())]:
        d = root / group
        files = d.rglob("*.yaml") if group == "experiment" else d.glob("*.yaml")
        names |= {f.relative_to(d).with_suffix("").as_posix() for f in files}
    if group in REGISTERED:
        registered = ConfigStore.instance().repo.get("schema", {}).get(group, {})
        names |= {name.removesuffix(".yaml") for name in registered}
    return sorted(names)


def fold(options: list[str]) -> str:
    """`paper/agree/{at_grpo, c3}`: nested options under their folder, one entry per folder."""
    flat = [o for o in options if "/" not in o]
    nested: dict[str, list[str]] = {}
    for o in options:
        if "/" in o:
            folder, _, leaf = o.rpartition("/")
            nested.setdefault(folder, []).append(leaf)
    return ", ".join([*flat, *(f"{folder}/{{{', '.join(leaves)}}}" for folder, leaves in sorted(nested.items()))])


def help_groups(config_name: str) -> str:
    """--help's list of config groups: the user's groups and their options, not the internal ones;
    a group outside the defaults list is shown with the `+` it needs."""
    try:
        defaults = yaml.safe_load((Path(CONF_DIR) / f"{config_name}.yaml").read_text()).get("defaults") or []
    except (OSError, ValueError, AttributeError):
        defaults = []
    in_defaults = {str(next(iter(d))).split("@")[0].removeprefix("override ") for d in defaults if isinstance(d, dict)}
    lines = []
    for group in config_groups():
        options = all_options(group)
        if not options:
            continue
        name = group if group in in_defaults else f"+{group}"
        lines.append(f"{name}: {fold(options)}")
    return "\n".join(lines)
