"""Every option of every config group composes and validates; bad values stop the run early."""

from pathlib import Path

import pytest

from magrpo.cli.train import CONF_DIR
from magrpo.config.schemas import ConfigError
from magrpo.validation.checks import validate

GROUPS = ["agents", "task", "reward", "algo", "optimizer", "hardware", "logger", "feedback", "debug", "experiment"]


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (Path(CONF_DIR) / group).glob("*.yaml"))


def test_every_group_exists_and_has_options():
    for group in GROUPS:
        assert _options(group), f"conf/{group}/ has no options"


def _needs_missing_cuda(group: str, option: str) -> bool:
    import torch
    from omegaconf import OmegaConf

    if group != "hardware" or torch.cuda.is_available():
        return False
    node = OmegaConf.load(Path(CONF_DIR) / group / f"{option}.yaml")
    return "cuda" in str(node.get("device")) or any("cuda" in str(d) for d in node.get("agent_devices") or [])


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS if g != "reward" for o in _options(g)])
def test_every_option_composes_and_validates(make_cfg, group, option):
    if _needs_missing_cuda(group, option):
        # Composes, but a GPU option on a machine without one stops at start-up, naming the key.
        with pytest.raises(ConfigError, match=r"hardware\.(device|agent_devices\[0\])='cuda(:0)?': no CUDA device"):
            validate(make_cfg([f"{group}={option}"]))
        return
    cfg = validate(make_cfg([f"{group}={option}"]))
    if group == "task":
        assert cfg.task.name == option
        assert cfg.reward.name == option, "each task selects the reward file of the same name"
    if group == "debug":
        assert cfg.max_steps == 2


@pytest.mark.parametrize("option", _options("reward"))
def test_every_reward_has_a_task_of_the_same_name(make_cfg, option):
    assert option in _options("task")
    cfg = validate(make_cfg([f"task={option}"]))
    assert cfg.reward.name == option


def test_smoke_caps_an_experiment(make_cfg):
    cfg = validate(make_cfg(["experiment=length_ratio_cross", "debug=smoke"]))
    assert cfg.max_steps == 2 and cfg.algo.joint_mode == "cross"


def test_grpo_is_single_agent(make_cfg):
    from magrpo.algos import ALGOS

    cfg = validate(make_cfg(["algo=grpo"]))
    team = ALGOS["grpo"].team(cfg)
    assert cfg.algo.name == "grpo" and team.form == "single" and team.num_policies == 1


@pytest.mark.parametrize("override,needles", [
    ("algo.num_generations=1", ["algo.num_generations", "1", ">= 2"]),
    ("algo.joint_mode=foo", ["algo.joint_mode", "'foo'", "aligned", "cross"]),
    ("optimizer.lr=-1", ["optimizer.lr", "-1", "> 0"]),
    ("algo.advantage=medain", ["algo.advantage", "'medain'", "mean", "rloo", "max", "raw"]),   # not 'median': a plugin test registers it
    ("algo.loss_agg=sum", ["algo.loss_agg", "'sum'", "seq_sum", "token_mean"]),
    ("algo.scale=zscore", ["algo.scale", "none", "group", "batch"]),
    ("algo.top_p=1.5", ["algo.top_p", "1.5", "(0, 1]"]),
    ("logger.mode=cloud", ["logger.mode", "offline", "online"]),
    ("agents.models.0.name_or_path=/no/such/model", ["agents.models[0].name_or_path", "/no/such/model", "no such"]),
    ("agents.models.0.name_or_path=builtin:huge", ["builtin:huge", "builtin:tiny", "builtin:small"]),
    ("agents.models.0.dtype=int3", ["dtype", "int3", "bfloat16"]),
    ("resume=/no/such/ckpt", ["resume", "/no/such/ckpt"]),
])
def test_bad_values_name_key_value_and_allowed(make_cfg, override, needles):
    with pytest.raises(ConfigError) as e:
        validate(make_cfg([override]))
    for needle in needles:
        assert needle in str(e.value), f"{needle!r} missing from: {e.value}"


def test_more_agent_models_than_agents(make_cfg):
    cfg = make_cfg(["agents=heterogeneous", "agents.num_agents=1"])
    with pytest.raises(ConfigError, match=r"agents.models has 2 entries but agents.num_agents=1"):
        validate(cfg)


@pytest.mark.parametrize("override,key", [
    ("+optimizer.lrr=0.1", "optimizer.lrr"),
    ("+algo.num_generation=4", "algo.num_generation"),
    ("+task.num_trian=3", "task.num_trian"),
    ("+reward.min_ration=2", "reward.min_ration"),
])
def test_typo_keys_are_rejected_with_the_allowed_keys(make_cfg, override, key):
    with pytest.raises(ConfigError) as e:
        validate(make_cfg([override]))
    assert key in str(e.value) and "allowed" in str(e.value)


def test_wrong_type_is_rejected(make_cfg):
    with pytest.raises(ConfigError, match=r"optimizer.lr='fast'"):
        validate(make_cfg(["optimizer.lr=fast"]))


def test_unknown_task_lists_the_known_ones(make_cfg):
    cfg = make_cfg()
    cfg.task.name = "poetry"
    with pytest.raises(ConfigError, match=r"task.name='poetry'.*length_ratio"):
        validate(cfg)


SCHEMA_GROUPS = ["agents", "algo", "optimizer", "hardware", "logger", "task", "reward", "feedback"]
BUNDLES = ["experiment", "recipe", "scale", "debug", "hparams_search", "method", "default_run"]   # `# @package _global_` overrides


def _yaml(path: Path) -> dict:
    import yaml

    return yaml.safe_load(path.read_text()) or {}


def _schema_node(group: str, name: str) -> dict:
    """What `/schema/<group>@_here_: <name>` puts under an option (magrpo.validation.store.register_schemas)."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    return OmegaConf.to_container(ConfigStore.instance().load(f"schema/{group}/{name}.yaml").node)


def _drift(data: dict, defaults: dict, prefix: str, duplicates: bool = True) -> list[str]:
    """Keys of `data` its schema lacks, and (with `duplicates`) values equal to the schema's default."""
    problems = []
    for key, value in data.items():
        if key not in defaults:
            problems.append(f"{prefix}{key}: not a key of its schema (allowed: {', '.join(defaults)})")
        elif isinstance(value, dict) and isinstance(defaults[key], dict):
            problems += _drift(value, defaults[key], f"{prefix}{key}.", duplicates)
        elif duplicates and value == defaults[key]:
            problems.append(f"{prefix}{key}: {value!r} repeats the schema's default")
    return problems


def _is_global(path: Path) -> bool:
    return path.read_text().startswith("# @package _global_")


def _schema_entry(group: str, path: Path) -> str:
    """The schema option an option of `group` starts from (its `/schema/<group>@_here_: NAME`, or
    `@<group>` in a `_global_` option, such as a large model's agents preset that also sets
    hardware.gradient_checkpointing)."""
    package = group if _is_global(path) else "_here_"
    for entry in _yaml(path).get("defaults") or []:
        if isinstance(entry, dict) and f"/schema/{group}@{package}" in entry:
            return entry[f"/schema/{group}@{package}"]
    raise AssertionError(f"{path}: its defaults list does not start from `/schema/{group}@{package}: ...`, so its "
                         f"defaults would not come from the schema dataclass")


@pytest.mark.parametrize("group,option", [(g, o) for g in SCHEMA_GROUPS for o in _options(g)])
def test_a_group_option_holds_only_what_differs_from_its_schema(group, option):
    """Each default lives in one place, the schema dataclass: an option under conf/<group>/ starts
    from the schema's defaults (`/schema/<group>@_here_`) and holds only what differs. A value equal
    to the schema's default is a duplicate that could drift; a key the schema lacks is a typo."""
    from magrpo.config.schemas import GROUP_SCHEMAS, defaults_of

    path = Path(CONF_DIR) / group / f"{option}.yaml"
    defaults = _schema_node(group, _schema_entry(group, path))
    data = {k: v for k, v in _yaml(path).items() if k != "defaults"}
    if _is_global(path):          # its own node under `group`, and other groups' nodes it sets
        defaults = {**{g: defaults_of(s) for g, s in GROUP_SCHEMAS.items()}, group: defaults}
    assert not _drift(data, defaults, f"{group}/{option}.yaml: "), _drift(data, defaults, f"{group}/{option}.yaml: ")


@pytest.mark.parametrize("entry", ["train", "eval"])
def test_an_entry_config_holds_only_what_differs_from_its_schema(entry):
    """conf/train.yaml and conf/eval.yaml start from `schema/entry` (TrainSchema / EvalRunSchema):
    their top-level keys, eval.* and sandbox.* hold only what differs; a group node they set
    (eval.yaml's logger) is checked against that group's schema."""
    from magrpo.config.schemas import GROUP_SCHEMAS, defaults_of

    data = _yaml(Path(CONF_DIR) / f"{entry}.yaml")
    assert "schema/entry@_here_" in str(data["defaults"][0]) and data["defaults"][1] == "_self_"
    defaults = {**_schema_node("entry", entry), **{g: defaults_of(s) for g, s in GROUP_SCHEMAS.items()}}
    data = {k: v for k, v in data.items() if k not in ("defaults", "hydra")}
    assert not _drift(data, defaults, f"{entry}.yaml: "), _drift(data, defaults, f"{entry}.yaml: ")


def _bundle_files() -> list[Path]:
    return sorted(p for b in BUNDLES for p in (Path(CONF_DIR) / b).rglob("*.yaml"))


@pytest.mark.parametrize("path", _bundle_files(), ids=lambda p: str(p.relative_to(CONF_DIR)))
def test_an_override_bundle_names_only_schema_keys(path):
    """Experiments, recipes, scales, debug and sweeper recipes override keys of the groups picked
    before them, so a value equal to a schema default may be deliberate (scale=tiny's lr 1e-3 over a
    recipe's 5e-6); but every key they set is a key of its schema (an algo.* key of some algorithm's,
    a task.* key of some task's...)."""
    from magrpo.algos import ALGOS
    from magrpo.config.schemas import GROUP_SCHEMAS, defaults_of, entry_defaults
    from magrpo.rollout.feedback import FEEDBACKS
    from magrpo.tasks import TASKS

    def union(group, names):
        merged: dict = {}
        for name in names:
            for k, v in _schema_node(group, name).items():
                merged[k] = {**merged.get(k, {}), **v} if isinstance(v, dict) else v
        return merged

    defaults = {**entry_defaults("eval"), **entry_defaults("train"), "tune": {}, "experiment": None,
                **{g: defaults_of(s) for g, s in GROUP_SCHEMAS.items()},
                "algo": union("algo", ALGOS), "feedback": union("feedback", FEEDBACKS),
                "task": union("task", TASKS), "reward": {**union("reward", TASKS), **_schema_node("reward_functions",
                                                                                                  "default")}}
    data = {k: v for k, v in _yaml(path).items() if k not in ("defaults", "hydra", "tune")}
    problems = _drift(data, defaults, f"{path.relative_to(CONF_DIR)}: ", duplicates=False)
    assert not problems, problems


@pytest.mark.parametrize("task", ["length_ratio", "tldr", "arxiv", "humaneval", "coophumaneval", "mbpp"])
def test_comparison_recipes_sweep_every_algorithm_with_one_budget(make_cfg, task):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        full = compose("train", overrides=[f"experiment=compare/{task}"], return_hydra_config=True)
    assert full.hydra.sweeper.params.algo.split(",") == ["magrpo", "grpo", "ippo", "mappo", "ppo"]
    budgets = set()
    for algo in ["magrpo", "grpo", "ippo", "mappo", "ppo"]:
        cfg = validate(make_cfg([f"experiment=compare/{task}", f"algo={algo}"]))
        assert cfg.task.name == task and cfg.algo.name == algo
        budgets.add((cfg.algo.batch_size, cfg.algo.num_generations))
    assert len(budgets) == 1


def test_eval_every_is_the_evaluation_cadence(make_cfg, recwarn):
    cfg = validate(make_cfg(["eval.every=3"]))
    assert cfg.eval.every == 3 and not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]
    assert validate(make_cfg()).eval.every == 20           # EvalSchema's default


def test_gradient_checkpointing_is_a_hardware_key(make_cfg, recwarn):
    assert validate(make_cfg(["hardware.gradient_checkpointing=true"])).hardware.gradient_checkpointing
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]
    # a large model's preset turns it on under the canonical key, whichever hardware option comes with it
    full = make_cfg(["agents=qwen3_1.7b", "hardware=gpu"])
    assert full.hardware.gradient_checkpointing is True and "gradient_checkpointing" not in full.agents


def test_compositions_share_the_config_store_and_see_what_is_registered_later(make_cfg):
    """Hydra's per-composition repository copy no longer copies the ConfigStore (register_schemas
    shares it): a node stored after an earlier composition still composes, and a composition never
    changes what the store holds."""
    import copy

    from hydra.core.config_store import ConfigStore

    store = ConfigStore.instance()
    assert copy.deepcopy(store) is store
    before = make_cfg(["task=agree"])
    store.store(group="experiment", name="_shared_store_probe", package="_global_", node={"max_steps": 7})
    try:
        assert make_cfg(["experiment=_shared_store_probe"]).max_steps == 7
        assert make_cfg(["task=agree"]) == before
        assert store.load("experiment/_shared_store_probe.yaml").node == {"max_steps": 7}
    finally:
        del store.repo["experiment"]["_shared_store_probe.yaml"]


def test_defaults_of_reads_each_schema_as_omegaconf_does():
    # defaults_of walks the dataclass fields itself (every command registers ~50 schemas when it
    # starts); it must give exactly OmegaConf's plain data: the same keys, values and value types.
    from omegaconf import OmegaConf

    from magrpo.algos import ALGOS
    from magrpo.config.groups import RewardConfig
    from magrpo.config.schemas import GROUP_SCHEMAS, EvalRunSchema, TrainSchema, defaults_of
    from magrpo.rollout.feedback import FEEDBACKS
    from magrpo.tasks import TASKS, reward_schema_of

    schemas = {TrainSchema, EvalRunSchema, RewardConfig, *GROUP_SCHEMAS.values(),
               *(c.config_schema for c in [*ALGOS.values(), *FEEDBACKS.values(), *TASKS.values()] if c.config_schema),
               *filter(None, map(reward_schema_of, TASKS.values()))}
    assert len(schemas) >= 40
    for schema in schemas:
        mine, theirs = defaults_of(schema), OmegaConf.to_container(OmegaConf.structured(schema))
        assert repr(mine) == repr(theirs), schema.__name__
    assert defaults_of(TrainSchema)["eval"]["num_samples"] == TrainSchema().eval.num_samples


def test_a_keys_help_is_declared_with_it_and_a_subclass_keeps_its_parents_help_and_check():
    # option(..., help=...) and every helper that makes a field keep the key's description in its
    # metadata; help_of reads it along the MRO, as the checks are read: a subclass that only changes
    # a default, or gives a help but no check, keeps what its parent declared.
    import dataclasses

    from omegaconf import OmegaConf

    from magrpo.config.schemas import defaults_of
    from magrpo.core.schema import at_least, check_values, help_of, option, positive, within
    from magrpo.tasks.data import limit_option, split_option

    @dataclasses.dataclass
    class Parent:
        steps: int = at_least(1, 3, help="steps per round")
        lr: float = positive(0.1, help="the step size")
        frac: float = within(0, 1, 0.5, lo_open=True, help="a share")
        split: str = split_option("train", help="the rows")
        limit: int | None = limit_option(help="rows kept")
        mode: str = option("a", choices=["a", "b"], help="which one")
        tags: list[str] = option(default_factory=list, help="labels")
        bare: int = 0

    @dataclasses.dataclass
    class Child(Parent):
        steps: int = 5                                   # only its default
        lr: float = option(0.2, help="a smaller step")   # its own help, no check of its own
        bare: int = option(1, help="now described")

    assert {f.name: help_of(Parent, f.name) for f in dataclasses.fields(Parent)} == {
        "steps": "steps per round", "lr": "the step size", "frac": "a share", "split": "the rows",
        "limit": "rows kept", "mode": "which one", "tags": "labels", "bare": ""}
    assert help_of(Child, "steps") == "steps per round" and help_of(Child, "lr") == "a smaller step"
    assert help_of(Child, "bare") == "now described" and help_of(Child, "tags") == "labels"
    for key, value in (("steps", 0), ("lr", 0.0)):       # the parent's checks still hold
        with pytest.raises(ConfigError, match=f"{key}="):
            check_values({**defaults_of(Child), key: value}, Child)
    check_values(defaults_of(Child), Child)
    # the help is metadata only: the node OmegaConf makes and the defaults are a plain field's
    assert OmegaConf.to_container(OmegaConf.structured(Child)) == defaults_of(Child) == {
        "steps": 5, "lr": 0.2, "frac": 0.5, "split": "train", "limit": None, "mode": "a", "tags": [], "bare": 1}


def test_register_schemas_again_stores_nothing_unless_something_was_registered_since(make_cfg):
    # A second call with nothing new stores nothing (a command run in this process before); after
    # an algorithm is registered, the next call stores it and it composes.
    from dataclasses import dataclass

    from hydra.core.config_store import ConfigStore

    from magrpo.algos import ALGOS, register_algo
    from magrpo.algos.magrpo import MAGRPO, MAGRPOConfig
    from magrpo.validation.store import register_schemas

    store = ConfigStore.instance()
    register_schemas()
    node = store.repo["schema"]["algo"]["magrpo.yaml"]
    register_schemas()
    assert store.repo["schema"]["algo"]["magrpo.yaml"] is node

    @dataclass
    class ProbeConfig(MAGRPOConfig):
        name: str = "_probe_algo"
        probe_knob: float = 0.25

    @register_algo("_probe_algo")
    class Probe(MAGRPO):
        config_schema = ProbeConfig

    try:
        register_schemas()
        assert "_probe_algo.yaml" in store.repo["schema"]["algo"]
        assert make_cfg(["algo=_probe_algo"]).algo.probe_knob == 0.25
    finally:
        ALGOS.unregister("_probe_algo")
        store.repo["schema"]["algo"].pop("_probe_algo.yaml", None)
        store.repo["algo"].pop("_probe_algo.yaml", None)


def test_every_yaml_file_in_conf_is_checked_against_a_schema():
    # Each file under conf/ is read by one of the key checks above: a group option against its
    # schema, an entry config, or an override bundle (experiments, recipes, methods, default runs,
    # scales...). Hydra's own configs (conf/hydra/: launchers, --help texts) are Hydra's schema.
    conf = Path(CONF_DIR)
    checked = {conf / g / f"{o}.yaml" for g in SCHEMA_GROUPS for o in _options(g)}
    checked |= {conf / "train.yaml", conf / "eval.yaml", *_bundle_files()}
    hydra_own = set((conf / "hydra").rglob("*.yaml"))
    unchecked = sorted(str(p.relative_to(conf)) for p in conf.rglob("*.yaml") if p not in checked | hydra_own)
    assert unchecked == []


# -- each key declared once -------------------------------------------------------------------------

# Keys that every schema of a group declares for itself: a task's (or reward variant's) own name,
# and the task's own `data` schema (each task's dataset has its own keys).
IDENTITY_KEYS = {"name", "data"}


def _declared_here(cls: type) -> set[str]:
    import dataclasses

    return {f.name for f in dataclasses.fields(cls) if f.name in cls.__dict__.get("__annotations__", {})}


def _group_classes(schemas) -> set[type]:
    """The dataclasses a group's schemas are made of: their bases and the nodes nested in them."""
    import dataclasses
    import typing

    found, stack = set(), list(schemas)
    while stack:
        cls = stack.pop()
        if cls in found or not dataclasses.is_dataclass(cls):
            continue
        found.add(cls)
        stack += [b for b in cls.__mro__[1:] if dataclasses.is_dataclass(b)]
        for hint in typing.get_type_hints(cls).values():
            stack += [t for a in (typing.get_args(hint) or (hint,)) for t in (typing.get_args(a) or (a,))]
    return found


def declared_twice(schemas) -> dict[str, list[str]]:
    """Key -> the classes that declare it first (no base of theirs has it), where more than one does:
    a key two unrelated schemas of one group each declare, instead of one shared dataclass that both
    compose (a subclass overriding a default is the same declaration)."""
    first: dict[str, set[str]] = {}
    for cls in _group_classes(schemas):
        inherited = set().union(*(_declared_here(b) for b in cls.__mro__[1:] if hasattr(b, "__dataclass_fields__")))
        for key in _declared_here(cls) - inherited:
            first.setdefault(key, set()).add(cls.__qualname__)
    return {k: sorted(v) for k, v in first.items() if len(v) > 1 and k not in IDENTITY_KEYS}


def test_each_key_of_a_config_group_is_declared_once():
    from magrpo.algos import ALGOS
    from magrpo.config.schemas import TrainSchema
    from magrpo.rollout.feedback import FEEDBACKS
    from magrpo.tasks import TASKS, available_tasks, reward_schema_of

    available_tasks()
    groups = {
        "algo": [c.config_schema for c in ALGOS.values()],
        "task": [c.config_schema for c in TASKS.values() if c.config_schema],
        "reward": [reward_schema_of(c) for c in TASKS.values() if reward_schema_of(c)],
        "feedback": [c.config_schema for c in FEEDBACKS.values()],
        **{f: [TrainSchema.__dataclass_fields__[f].default_factory]
           for f in ("agents", "optimizer", "hardware", "logger", "eval", "sandbox")},
    }
    assert {g: declared_twice(s) for g, s in groups.items() if declared_twice(s)} == {}


def test_the_declared_twice_check_finds_a_key_two_unrelated_schemas_declare():
    from dataclasses import dataclass

    @dataclass
    class Shared:
        limit: int = 1

    @dataclass
    class A(Shared):
        path: str = ""
        limit: int = 2          # an override of the shared key: one declaration

    @dataclass
    class B:
        path: str = ""

    assert declared_twice([A]) == {}
    found = declared_twice([A, B])
    assert list(found) == ["path"] and [q.rsplit(".", 1)[-1] for q in found["path"]] == ["A", "B"]


def test_after_validation_config_nodes_are_read_as_attributes(tmp_path, monkeypatch):
    """No line of magrpo/ reads a config node with `.get(key, default)`: a default lives only in its
    schema, and a typed node is read as attributes. A spy on DictConfig.get records every magrpo
    line that calls it while training (one turn; two turns with diagnostics feedback and a reward
    function in place of the task's reward) and evaluating a checkpoint; the calls it sees must be
    none (a planted call shows the spy sees them)."""
    import sys

    from omegaconf import DictConfig, OmegaConf

    import magrpo
    from magrpo.cli.evaluate import main as eval_main
    from magrpo.cli.train import main as train_main
    from tests.conftest import run_cli

    package = str(Path(magrpo.__file__).resolve().parent)
    seen: list[str] = []
    original = DictConfig.get

    def spy(self, key, default_value=None):
        caller = sys._getframe(1).f_code.co_filename
        if str(Path(caller).resolve()).startswith(package):
            seen.append(f"{Path(caller).name}:{sys._getframe(1).f_lineno}")
        return original(self, key, default_value)

    monkeypatch.setattr(DictConfig, "get", spy)
    exec(compile("OmegaConf.create({'a': 1}).get('a')", str(Path(package) / "planted.py"), "exec"),
         {"OmegaConf": OmegaConf})
    assert seen == ["planted.py:1"]
    seen.clear()
    runs = {"one": ["debug=smoke"],
            "turns": ["debug=smoke", "algo=at_grpo", "algo.num_turns=2", "feedback=diagnostics",
                      "reward.fn=tests.reward_fns_example:brevity"]}
    for name, args in runs.items():
        assert run_cli(train_main, "magrpo-train", [*args, f"output_dir={tmp_path / name}"]) == 0, name
    assert run_cli(eval_main, "magrpo-eval", ["debug=smoke", f"checkpoint={tmp_path / 'one'}",
                                               f"output_dir={tmp_path / 'eval'}"]) == 0
    assert seen == []
