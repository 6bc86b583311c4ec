"""Our one line for an override Hydra cannot apply (a mistyped key, an unknown group option, a sweep
value in a single run...), in place of Hydra's own words: cli_main and magrpo.experiment report it."""

from __future__ import annotations

import re
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra._internal.utils import get_args_parser
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import (
    ConfigCompositionException,
    HydraException,
    MissingConfigException,
    OverrideParseException,
)
from omegaconf import DictConfig, OmegaConf

from magrpo.config.schemas import CONF_DIR
from magrpo.core.overrides import override_key
from magrpo.core.schema import did_you_mean
from magrpo.launch.groups import all_options, config_groups, fold, group_options


def _overrides(argv: list[str]) -> list[str]:
    return [a for a in argv if not a.startswith("-")]


def explain_override_error(exc: BaseException, config_name: str, argv: list[str]) -> str | None:
    """Our message for an override Hydra could not apply, or None for anything else."""
    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and exc.options is not None:
        group, _, bad = exc.missing_cfg_file.rpartition("/")
        top = group.split("/")[0]
        if "/" in group and (Path(CONF_DIR) / top).is_dir():       # a nested option: experiment=paper/covr/magrpo
            value = exc.missing_cfg_file[len(top) + 1:]
            options = all_options(top)
            folder = value.rpartition("/")[0]
            while folder and not any(o.startswith(folder + "/") for o in options):
                folder = folder.rpartition("/")[0]
            shown = [o for o in options if o.startswith(folder + "/")] if folder else options
            return (f"{top}={value!r} is not an option of the config group {top!r}; choose one of: {fold(shown)}"
                    f"{did_you_mean(value, options)}")
        return (f"{group}={bad!r} is not an option of the config group {group!r}; choose one of: "
                f"{', '.join(exc.options)}{_other_group(group, bad) or did_you_mean(bad, exc.options)}")
    if isinstance(exc, OverrideParseException):
        return (f"cannot parse the overrides ({str(exc).splitlines()[0]}); quote values with brackets, "
                f"commas or spaces, e.g. task.data.eval_split='test[:32]'")
    if isinstance(exc, ValueError) and str(exc).startswith("Config group override must be"):
        for arg in _overrides(argv):
            group, _, value = arg.lstrip("+~").partition("=")
            options = group_options(group)
            if options and value not in options:
                return (f"{group}={value!r} is not an option of the config group {group!r}; choose one of: "
                        f"{', '.join(options)}{did_you_mean(value, options)}")
        return None
    if isinstance(exc, ConfigCompositionException):
        msg = _composition_message(str(exc))
        if msg is not None:
            return msg
    key = getattr(exc.__cause__, "full_key", None)
    if isinstance(exc, ConfigCompositionException) and key:
        m = re.match(r"Could not override '([^']+)'", str(exc))
        typed = m.group(1) if m else key
        parent, _, leaf = typed.rpartition(".")
        cfg = _composed(config_name, [a for a in _overrides(argv) if override_key(a) != typed])
        allowed = _keys_at(config_name, [], parent, cfg)
        if leaf in allowed:     # defined only by an option the sweep chooses per job (an experiment's key)
            return (f"{typed!r} is not in conf/{config_name}.yaml: only an option chosen per job of this sweep "
                    f"defines it, and Hydra checks command-line keys before it chooses; write ++{typed}=VALUE "
                    f"to set it in every job")
        where = f"in {parent}" if parent else "at the top level"
        listing = f"; keys allowed {where}: {', '.join(allowed)}" if allowed else ""
        return f"unknown config key {typed!r}{listing}{_elsewhere(cfg, parent, leaf) or did_you_mean(leaf, allowed)}"
    if isinstance(exc, HydraException):         # any other composition error: its first line, no traceback
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"cannot compose the config ({first[:300]})"
    return None


def dashed_overrides(argv: list[str], prog: str) -> str | None:
    """Our line for `--key=value` and `--key value` (what argparse and TRL commands take), which Hydra
    would answer with its usage block: the same overrides in Hydra's form, `key=value`. None when
    every `--` argument is one of Hydra's own options (--help, --cfg job, -m ...) or a prefix of one."""
    parser = get_args_parser()
    own = [s for a in parser._actions for s in a.option_strings if s.startswith("--")]
    takes_value = {s for a in parser._actions if a.nargs is None for s in a.option_strings}
    given, fixed, i = [], [], 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        name, eq, value = arg.partition("=")
        if name in takes_value and not eq:
            i += 1                               # --cfg job, -cn train: the value is Hydra's
        if not arg.startswith("--") or arg == "--" or any(o.startswith(name) for o in own):
            continue
        if not eq and i < len(argv) and not argv[i].startswith("-") and "=" not in argv[i]:
            eq, value = "=", argv[i]              # --key value
            given.append(f"{arg} {value}")
            i += 1
        else:
            given.append(arg)
        fixed.append(f"{name[2:].replace('-', '_')}={value if eq else 'VALUE'}")
    if not given:
        return None
    return (f"{', '.join(repr(g) for g in given)}: {prog} takes no such option; a key is set as a Hydra override, "
            f"key=value: write {' '.join(fixed)} ({prog} --help lists the keys)")


def _composition_message(text: str) -> str | None:
    """Our line for the composition errors Hydra words as advice: a sweep value in a single run, and
    a group that is not in the defaults list (`recipe=cover`, `experiment/paper/agree=magrpo`)."""
    m = re.match(r"Ambiguous value for argument '([^']*)'", text)
    if m:
        line = m.group(1)
        key, _, value = line.partition("=")
        return (f"{line!r} gives several values, which is a sweep; a single run takes one value: run "
                f"`-m {line}` to sweep over them, write {key}=[{value}] for a list or {key}='{value}' for a string")
    m = re.match(r"Multiple values for ([\w/.]+)\.", text)
    if m:
        group = m.group(1)
        return (f"+{group}=... adds the config group {group!r}, which the config already picks; write "
                f"{group}=OPTION to pick another option")
    m = re.match(r"Could not override '([^']*)'\. No match in the defaults list", text)
    if m:
        group = m.group(1)
        root, _, rest = group.partition("/")
        options = group_options(group)
        if rest and (Path(CONF_DIR) / root).is_dir():
            return (f"{group!r} is no config group of its own: the options under conf/{group}/ belong to the group "
                    f"{root!r}; write {root}={rest}/OPTION (e.g. {root}={rest}/{options[0] if options else '...'})")
        if options:
            return (f"the config group {group!r} is not in the defaults, so it cannot be replaced; add it with "
                    f"+{group}=OPTION (one of: {', '.join(options)})")
        return f"{group!r} is not a config group; the groups are: {', '.join(config_groups())}"
    return None


def _other_group(group: str, value: str) -> str:
    """"; 'gspo' is an option of the group 'method': did you mean method=gspo?" when another config
    group has the option, else "" (algo=gspo: GSPO is MAGRPO with other keys, a method)."""
    there = [g for g in config_groups() if g != group and value in group_options(g)]
    return f"; {value!r} is an option of the group {there[0]!r}: did you mean {there[0]}={value}?" if there else ""


def _composed(config_name: str, overrides: list[str]) -> DictConfig | None:
    """The config composed with `overrides` (sweep values: the first); None when it cannot be."""
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
        single = [f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}" if o.is_sweep_override()
                  else o.input_line or line for o, line in zip(parsed, overrides)]
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
            return compose(config_name=config_name, overrides=single)
    except Exception:
        return None
    finally:
        GlobalHydra.instance().clear()


def _keys_at(config_name: str, overrides: list[str], dotted: str, cfg: DictConfig | None = None) -> list[str]:
    """Keys of the node `dotted` of the config composed with `overrides`; [] when that cannot be
    composed."""
    cfg = cfg if cfg is not None else _composed(config_name, overrides)
    if cfg is None:
        return []
    try:
        node = OmegaConf.select(cfg, dotted) if dotted else cfg
    except Exception:
        return []
    return sorted(str(k) for k in node.keys()) if OmegaConf.is_dict(node) else []


def _elsewhere(cfg: DictConfig | None, parent: str, leaf: str) -> str:
    """"; 'lr' is a key of optimizer: did you mean 'optimizer.lr'?" when another top-level node of
    the composed config has the key, else ""."""
    if cfg is None or not leaf:
        return ""
    top = parent.split(".")[0]
    raw = OmegaConf.to_container(cfg, resolve=False)       # keys only: nothing is resolved
    if not isinstance(raw, dict):
        return ""
    there = sorted(str(k) for k, v in raw.items() if str(k) != top and isinstance(v, dict) and leaf in v)
    return f"; {leaf!r} is a key of {there[0]}: did you mean '{there[0]}.{leaf}'?" if there else ""
