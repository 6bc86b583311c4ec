"""Every option of every config group composes and validates; bad values stop the run early."""

from pathlib import Path

import pytest

from magrpo.config import ConfigError, validate
from magrpo.train import CONF_DIR

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
    return "cuda" in str(node.device) or any("cuda" in str(d) for d in node.agent_devices or [])


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


@pytest.mark.parametrize("group,option,schema", [("optimizer", "adamw", "OptimizerSchema"),
                                                 ("logger", "none", "LoggerSchema"),
                                                 ("agents", "tiny", "AgentsSchema")])
def test_default_yaml_and_schema_agree(group, option, schema):
    """A default lives in one place: where a group's YAML repeats a schema default, they agree."""
    import dataclasses

    import yaml

    from magrpo import config

    cls = getattr(config, schema)
    data = yaml.safe_load((Path(CONF_DIR) / group / f"{option}.yaml").read_text())
    for f in dataclasses.fields(cls):
        if f.name in data and f.default is not dataclasses.MISSING:
            assert data[f.name] == f.default, (group, f.name, data[f.name], f.default)


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
