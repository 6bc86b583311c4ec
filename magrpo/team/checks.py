"""An exported team someone may have made, read and checked before anything of it loads: every file
against the manifest, team.json field by field and what it claims against the config it carries,
the code it records under the trust rule and the keys that choose where data goes only when you
made it (magrpo.core.trust), the files its files name. Each problem is one ConfigError line.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import huggingface_hub
from omegaconf import DictConfig, OmegaConf

from magrpo.algos import ALGOS
from magrpo.config.run import EvalRunConfig, RunConfig
from magrpo.config.schemas import TrainSchema
from magrpo.core import checkpoint, records, trust
from magrpo.core.checkpoint import TEAM_FILE
from magrpo.core.instances import as_data
from magrpo.core.overrides import check_saved_line
from magrpo.core.schema import ConfigError
from magrpo.core.writes import is_temp_name
from magrpo.models import hub
from magrpo.models.agents import (
    team_level,
)
from magrpo.rollout.turns import TurnSpec
from magrpo.team.format import FORMAT, TEAM_NODES
from magrpo.validation.checks import validate

log = logging.getLogger(__name__)


# Keys of a team's config that loading sets itself, whatever the record says: each agent's model and
# tokenizer are the team's own folders.
TEAM_OWN_KEYS = ("agents.models.name_or_path", "agents.models.tokenizer")
TEAM_MODEL_KEYS = ("agents.models[*].name_or_path", "agents.models[*].tokenizer")


def read_team(root: Path, trust_plugins: bool = False) -> dict[str, Any]:
    """team.json of an exported team, checked: the files against the manifest (every one inside the
    directory, none unlisted where loading reads), every field's type, then the plugins and reward
    modules it records taken up as the trust rule says (magrpo.core.trust; `trust_plugins`: the
    caller's say), and what the team claims (task, algorithm, team size, topology, turns, level,
    policies) against its config."""
    return _read_team(root, trust_plugins)[0]


def _read_team(root: Path, trust_plugins: bool = False) -> tuple[dict[str, Any], trust.TakeUp]:
    """read_team's record, and what its take-up allowed."""
    root = Path(root)
    if is_temp_name(root.resolve().name):
        raise ConfigError(f"{root}: the temporary directory of an export that did not finish; it is no team: "
                          f"export again with magrpo-export RUN_DIR OUT_DIR")
    f = root / TEAM_FILE
    if not root.exists():
        raise ConfigError(f"{str(root)!r}: no such directory (and not a hub repo id 'owner/name')")
    if not f.is_file():
        raise ConfigError(f"{root}: not an exported team (no {TEAM_FILE}); write one with magrpo-export RUN_DIR OUT_DIR")
    manifest = checkpoint.verify(root, (TEAM_FILE,), "team")   # every file whole and inside (written last)
    info = records.load_json(f)
    _check_fields(info, f)
    records.refuse_interpolations(info["config"], f"{f}: config")
    records.refuse_interpolations(info["overrides"] or [], f"{f}: overrides")
    adapters = {e["policy"] for e in info["models"] if e["adapter"]}     # a LoRA team's adapter folders
    for folder in sorted({e[k] for e in info["models"] for k in ("load", "tokenizer")} | adapters):
        checkpoint.check_only_listed(root, folder, manifest["files"], "team")
    _check_file_references(root, manifest["files"])
    up = trust.take_up(root, trust_plugins=True if trust_plugins else None)     # before anything is imported
    _check_config(info, f)
    return info, up
# team.json's fields: name -> (the types allowed, what the one line says is expected)
_OBJ, _STR, _INT, _NUM = (dict,), (str,), (int,), (int, float)
RECORD_FIELDS: dict[str, tuple[tuple, str]] = {
    "format": (_INT, f"the integer {FORMAT}"), "task": (_STR, "a task name"),
    "num_agents": (_INT, "an integer >= 1"), "form": (_STR, "multi or single"),
    "level": (_STR, "separate, lora_per_role or shared_policy"), "algorithm": (_STR, "an algorithm name"),
    "topology": (_STR, "a topology name"), "turns": (_OBJ, "an object (num_turns, discount, ...)"),
    "feedback": (_OBJ, "an object (mode, ...)"), "assembly": (_STR, "a string"),
    "roles": ((list,), "a list with one object per agent"), "weights": (_STR, "adapters or full"),
    "models": ((list,), "a list with one object per policy"), "sampling": (_OBJ, "an object"),
    "source": (_OBJ, "an object"), "config": (_OBJ, "an object (the team's task, reward, algo, agents, ...)"),
}
OPTIONAL_FIELDS: dict[str, tuple[tuple, str]] = {
    "plugins": ((list, type(None)), "a list of module names, or null"),
    "overrides": ((list, type(None)), "a list of key=value strings, or null"),
    "final_eval": ((dict, type(None)), "an object, or null"),
}
MODEL_FIELDS = {"policy": (_STR, "a policy name"), "spec": (_INT, "an index into config.agents.models"),
                "adapter": ((bool,), "true or false"), "load": (_STR, "a folder of the team"),
                "tokenizer": (_STR, "a folder of the team")}


def _typed_field(where: Path | str, name: str, value: Any, types: tuple, expected: str) -> Any:
    bad_bool = isinstance(value, bool) and bool not in types     # JSON true is no number here
    if not isinstance(value, types) or bad_bool:
        raise ConfigError(f"{where}: {name} is {json.dumps(value)[:80] if _jsonable(value) else type(value).__name__}"
                          f"; expected {expected}")
    return value


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def check_team_record(info: Any, where: Path | str) -> None:
    """Every field of team.json typed, and what it claims agreeing with its config: one ConfigError
    line that names the field and what was expected. The plugins it records are taken up before
    (read_team: magrpo.core.trust); nothing is imported here."""
    _check_fields(info, where)
    _check_config(info, where)


def _check_config(info: dict, where: Path | str) -> None:
    """team.json's config validated, and what the record claims agreeing with it (fields checked)."""
    cfg = check_team_config(OmegaConf.create(info["config"]), f"{where}: config")
    _check_claims(info, cfg, where)


def _check_fields(info: Any, where: Path | str) -> None:
    """Every field of team.json present and of its type, the model folders' names included."""
    if not isinstance(info, dict):
        raise ConfigError(f"{where}: not a team record (a JSON object), but {type(info).__name__}")
    fmt = info.get("format")
    if fmt != FORMAT or isinstance(fmt, bool):
        raise ConfigError(f"{where}: format {fmt!r}; this magrpo reads format {FORMAT}")
    for name, (types, expected) in RECORD_FIELDS.items():
        if name not in info:
            raise ConfigError(f"{where}: the field {name!r} is missing; expected {expected}")
        _typed_field(where, name, info[name], types, expected)
    for name, (types, expected) in OPTIONAL_FIELDS.items():
        _typed_field(where, name, info.get(name), types, expected)
    if info["overrides"] is not None:
        for line in info["overrides"]:
            check_saved_line(line, f"{where}: overrides")
    if info["weights"] not in ("adapters", "full"):
        raise ConfigError(f"{where}: weights is {info['weights']!r}; expected adapters or full")
    for k, entry in enumerate(info["models"]):
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: models[{k}] is {type(entry).__name__}; expected an object ({', '.join(MODEL_FIELDS)})")
        for name, (types, expected) in MODEL_FIELDS.items():
            if name not in entry:
                raise ConfigError(f"{where}: models[{k}].{name} is missing; expected {expected}")
            _typed_field(where, f"models[{k}].{name}", entry[name], types, expected)
    for k, role in enumerate(info["roles"]):
        if not isinstance(role, dict) or not isinstance(role.get("policy"), str):
            raise ConfigError(f"{where}: roles[{k}] is not an object with a policy name")
    for k, entry in enumerate(info["models"]):
        for key in ("load", "tokenizer"):
            name = entry[key]
            if not name or "/" in name or "\\" in name or name in (".", "..") or name.startswith("."):
                raise ConfigError(f"{where}: models[{k}].{key} is {name!r}; expected the name of a folder of the team "
                                  f"(agent_1, policy, base, ...)")


def typed_team_config(config: DictConfig, where: Path | str) -> RunConfig:
    """A recorded team config (a checkpoint's config.json or team.json's `config`) as the team
    reads it: a RunConfig of the team's nodes (every other key its schema default), with its
    models' recorded paths and tokenizers, and this machine's sandbox (`auto`), never the record's."""
    typed = check_team_config(config, where)
    for spec, recorded in zip(typed.agents.models, config.agents.models):
        spec.name_or_path, spec.tokenizer = recorded.name_or_path, recorded.get("tokenizer")
    return typed


def check_team_config(config: DictConfig, where: Path | str) -> RunConfig:
    """A team's config (team.json's `config`, or a checkpoint's config.json) validated as a run's
    config is: the one-line ConfigError names the key. Model paths are not checked here (an exported
    team's models are its own folders)."""
    missing = [k for k in ("task", "algo", "agents") if k not in config or not OmegaConf.is_dict(config[k])]
    if missing:
        raise ConfigError(f"{where}: the node(s) {', '.join(missing)} are missing; a team's config holds its "
                          f"task, reward, algo and agents")
    # what it names, resolved, was taken up (read_team, from_run); its trust_remote_code and sandbox are
    # set by the loader, never taken from it
    trust.check_composed(config, str(where), caller_keys=False)
    try:
        nodes = {k: OmegaConf.to_container(config[k], resolve=True) for k in TEAM_NODES
                 if k in config and k != "sandbox"}
        agents = nodes["agents"]       # a mapping: checked above
        for spec in (agents.get("models") if isinstance(agents, dict) else None) or []:
            if isinstance(spec, dict) and isinstance(spec.get("name_or_path"), str):
                spec["name_or_path"] = "builtin:tiny"        # where the weights are is checked elsewhere
                spec["tokenizer"] = None
        merged = OmegaConf.merge(OmegaConf.structured(TrainSchema), nodes)
        if not isinstance(merged, DictConfig):      # a schema's node merged with mappings is one
            raise TypeError(f"the config merged into a {type(merged).__name__}")
        return validate(merged, recorded=True)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    except Exception as e:       # a node of the wrong shape that the schemas do not reach
        raise ConfigError(f"{where}: not a valid team config ({type(e).__name__}: "
                          f"{str(e).strip().splitlines()[0] if str(e).strip() else ''})") from None


def _check_claims(info: dict, cfg: RunConfig, where: Path | str) -> None:
    """What team.json says of the team must be what its config builds."""
    spec = ALGOS[cfg.algo.name].team(cfg)
    turns = TurnSpec.from_algo(cfg.algo)
    feedback = cfg.feedback.mode
    claims = [("task", info["task"], cfg.task.name), ("algorithm", info["algorithm"], cfg.algo.name),
              ("num_agents", info["num_agents"], spec.num_agents), ("form", info["form"], spec.form),
              ("level", info["level"], team_level(cfg.agents)), ("topology", info["topology"], turns.topology),
              ("turns.num_turns", info["turns"].get("num_turns"), turns.num_turns),
              ("feedback.mode", info["feedback"].get("mode", "none"), feedback),
              ("roles (their count)", len(info["roles"]), spec.num_agents),
              ("models (their policies)", [m["policy"] for m in info["models"]], spec.policy_dirs)]
    for name, claimed, built in claims:
        if claimed != built:
            raise ConfigError(f"{where}: {name} is {claimed!r} but the team's config builds {built!r}; the team "
                              f"contradicts itself and is not loaded")
    num_specs = len(cfg.agents.models)
    for k, entry in enumerate(info["models"]):
        if not 0 <= entry["spec"] < num_specs:
            raise ConfigError(f"{where}: models[{k}].spec is {entry['spec']}; the config has {num_specs} model "
                              f"entr{'y' if num_specs == 1 else 'ies'} (0..{num_specs - 1})")
    adapters = any(m["adapter"] for m in info["models"])
    if (info["weights"] == "adapters") != adapters:
        raise ConfigError(f"{where}: weights is {info['weights']!r} but models say "
                          f"{'adapters' if adapters else 'full weights'}")


# Tokenizer settings that name a file: transformers opens whatever they say, so they must name a
# listed file of the same folder (or nothing).
_INDEX_SUFFIX = ".index.json"


def _check_file_references(root: Path, files: dict) -> None:
    """Files a loader opens because another file names it (a sharded model's index, a tokenizer's
    `*_file` settings) must be listed files of the same folder."""
    for name in files:
        folder, _, base = name.rpartition("/")
        if base.endswith(_INDEX_SUFFIX) or base == "tokenizer_config.json":
            data = records.load_json(root / name)
            if not isinstance(data, dict):
                raise ConfigError(f"{root}: {name} is not a JSON object")
            weight_map = data.get("weight_map") or {}
            if base.endswith(_INDEX_SUFFIX) and not isinstance(weight_map, dict):
                raise ConfigError(f"{root}: {name}: weight_map is {type(weight_map).__name__}; expected an object "
                                  f"(tensor name -> file)")
            named = (list(weight_map.values()) if base.endswith(_INDEX_SUFFIX) else
                     [v for k, v in data.items() if str(k).endswith("_file") and v is not None])
            for ref in named:
                target = f"{folder}/{ref}" if folder else str(ref)
                if not isinstance(ref, str) or "/" in ref or "\\" in ref or target not in files:
                    raise ConfigError(f"{root}: {name} names the file {str(ref)[:120]!r}, which is not a listed file "
                                      f"of {folder or 'the team'}/; a team reads only its own listed files")


def local_team(path_or_repo: str | Path, revision: str | None = None) -> Path:
    """A team directory: the path itself, or the local copy of a hub repo id (downloaded once)."""
    p = Path(str(path_or_repo)).expanduser()
    if p.exists():
        if not p.is_dir():
            raise ConfigError(f"{path_or_repo}: a file; give an exported team's directory or a hub repo id")
        return p
    text = str(path_or_repo)
    if not hub.is_repo_id(text):
        raise ConfigError(f"{text!r}: no such directory (and not a hub repo id 'owner/name')")

    hub.ensure_mode()
    try:
        return Path(huggingface_hub.snapshot_download(repo_id=text, revision=revision))
    except Exception as e:
        reason = hub.offline_reason()
        if reason is not None:
            raise ConfigError(f"team {text!r} is not in the local cache and {reason}; on a machine with a network "
                              f"run `hf download {text} --local-dir DIR`, copy DIR here and load DIR "
                              f"(team=DIR, Team.from_pretrained(DIR))") from e
        raise ConfigError(f"could not download the team {text!r}: {type(e).__name__}: {e}") from e


def check_team_option(cfg: EvalRunConfig) -> None:
    """magrpo-eval's `team=` names a whole exported team whose agents match the ones the (validated)
    config builds; `cfg.team` becomes the team's local directory."""
    team = cfg.team
    if team is None:
        raise ValueError("check_team_option: the config names no team (team=)")
    root = local_team(team)
    info = read_team(root)
    # the team's models are its own folders; the base models they came from count only for eval.ablation=base
    base = cfg.eval.diagnostics and cfg.eval.ablation == "base"
    free = () if base else TEAM_MODEL_KEYS
    changes = checkpoint.config_changes(info["config"], as_data(cfg),
                                        only=checkpoint.AGENT_KEYS, free=free)
    if changes:
        raise ConfigError(f"team={str(team)!r} was trained with other agents settings ({checkpoint.describe(changes)}); "
                          f"an exported team's models are its own: drop the agents overrides")
    policies = ALGOS[cfg.algo.name].team(cfg).policy_dirs
    held = [m["policy"] for m in info["models"]]
    if policies != held:
        raise ConfigError(f"team={str(team)!r} holds {len(held)} policy(ies) ({', '.join(held)}) but "
                          f"algo={cfg.algo.name} builds {len(policies)} ({', '.join(policies)}); evaluate it with "
                          f"the algo it was trained with ({info['algorithm']})")
    cfg.team = str(root)
