"""The start-up check of a composed config: `validate` merges each group into the schema its
choice registers (the algorithm's, the task's, the feedback mode's: magrpo.config.schemas), checks every
value against its allowed set or range, then the choices against each other (this algorithm with
that task and team). A bad config stops the command before any work with one line that names the
key, the bad value and what is allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import overload

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from magrpo.algos import ALGOS
from magrpo.algos.keys import reward_kind
from magrpo.config.groups import RewardConfig, TaskConfig
from magrpo.config.run import EvalRunConfig, RunConfig
from magrpo.config.schemas import (
    EvalRunSchema,
    ModelSchema,
    SandboxSchema,
    TrainSchema,
    typed_node,
)
from magrpo.core import checkpoint
from magrpo.core.instances import as_data, instance
from magrpo.core.plugins import load_plugins, loaded
from magrpo.core.schema import ConfigError, check_values, literal_strings
from magrpo.models.agents import BUILTIN_PREFIX, looks_local
from magrpo.models.model_shapes import BUILTIN_MODELS
from magrpo.rollout.feedback import FEEDBACKS
from magrpo.rollout.record import BASELINES, SCHEMES
from magrpo.rollout.turns import sequences_per_item, tree_size
from magrpo.sandbox import SandboxUnavailable, isolation_level
from magrpo.sandbox.limits import ISOLATION_CHOICES
from magrpo.tasks import TASKS, Task, available_tasks, reward_schema_of
from magrpo.tasks.reward_fns import check_reward_node, reward_specs


@overload
def validate(cfg: DictConfig, schema: type[EvalRunSchema], recorded: bool = False) -> EvalRunConfig: ...


@overload
def validate(cfg: DictConfig, schema: type[TrainSchema] = TrainSchema, recorded: bool = False) -> RunConfig: ...


def validate(cfg: DictConfig, schema: type[TrainSchema] = TrainSchema, recorded: bool = False) -> RunConfig:
    """Check the composed config; return it as a RunConfig (an EvalRunConfig for EvalRunSchema):
    instances of the schemas, every default filled in, each chosen group its option's schema.
    Raises ConfigError.
    `recorded`: the config a run or team recorded (magrpo.team.team), whose plugins and reward modules
    the trust rule has taken up already (magrpo.core.trust): nothing is imported for it here."""
    # The user's plugins first: they may register the task, algorithm or feedback mode named below.
    wanted = OmegaConf.select(cfg, "plugins")
    if wanted is not None and not OmegaConf.is_list(wanted) and not isinstance(wanted, list):
        raise ConfigError(f"plugins={wanted!r}: give a list of module names, e.g. plugins=[my_pkg.tasks]")
    if recorded:
        missing = [str(m) for m in wanted or [] if str(m) not in loaded()]
        if missing:
            raise ConfigError(f"plugins={missing}: not taken up (magrpo.core.trust.take_up imports a run's or team's "
                              f"plugins when you trust it); nothing was imported")
        plugins = [str(m) for m in wanted or []]
    else:
        plugins = load_plugins([str(m) for m in wanted or []])

    # The algo node is checked against the schema its algorithm registers (its only source of
    # defaults); it is merged first, so that keys elsewhere may interpolate its defaults.
    raw_algo = _resolved(cfg.algo) if OmegaConf.select(cfg, "algo") is not None else {}
    algo_name = raw_algo.get("name", "magrpo")
    if algo_name not in ALGOS:
        raise ConfigError(f"algo.name={algo_name!r} is not allowed; choose one of: {', '.join(sorted(ALGOS))}")
    algo_schema = ALGOS[algo_name].config_schema
    whole = OmegaConf.to_container(cfg)
    algo_node = typed_node(OmegaConf.create(raw_algo), algo_schema, "algo.", whole if isinstance(whole, dict) else None)
    cfg = cfg.copy()
    with _open(cfg):
        cfg.algo = OmegaConf.to_container(algo_node)

    raw = _resolved(cfg)
    raw_task, raw_reward = raw.pop("task", None), raw.pop("reward", None)
    raw.pop("algo", None)
    raw_feedback = raw.pop("feedback", None) or {}
    # Each agent's entry on its own first, so that an error names it (agents.models[1].optimizer.lrr).
    for i, spec in enumerate((raw.get("agents") or {}).get("models") or []):
        if isinstance(spec, dict):
            typed_node(OmegaConf.create(spec), ModelSchema, f"agents.models[{i}].")
    typed = typed_node(OmegaConf.create(raw), schema, "")

    # The feedback node is checked against the schema of the mode it names.

    mode = raw_feedback.get("mode", "none")
    if mode not in FEEDBACKS:
        raise ConfigError(f"feedback.mode={mode!r} is not allowed; choose one of: {', '.join(sorted(FEEDBACKS))}")
    feedback_schema = FEEDBACKS[mode].config_schema
    feedback_node = typed_node(OmegaConf.create(raw_feedback), feedback_schema, "feedback.", raw)

    # Task and reward nodes are checked against the schemas their task registers.
    if not raw_task or "name" not in raw_task:
        raise ConfigError(f"task.name is missing; choose one of: {', '.join(available_tasks())}")
    if raw_task["name"] not in available_tasks():
        raise ConfigError(f"task.name={raw_task['name']!r} is not a known task; choose one of: "
                          f"{', '.join(available_tasks())}")
    task_cls = TASKS[raw_task["name"]]
    task_node = typed_node(OmegaConf.create(raw_task), task_cls.config_schema, "task.", raw) \
        if task_cls.config_schema else OmegaConf.create(raw_task)
    # The task's reward schema, with the reward-function keys (RewardConfig); a task without one
    # gets RewardConfig's keys typed and checked, and keeps any other key of its node free-form.
    reward_schema = reward_schema_of(task_cls) or RewardConfig
    reward_node = typed_node(OmegaConf.create(raw_reward or {}), reward_schema, "reward.",
                             open_keys=reward_schema_of(task_cls) is None)
    with _open(typed):
        typed.plugins = plugins           # every plugin this process imported: what the run records
        typed.task = task_node
        typed.reward = reward_node
        typed.algo = algo_node
        typed.feedback = feedback_node

    check_values(typed, schema)
    check_values(algo_node, algo_schema, "algo.")
    check_values(feedback_node, feedback_schema, "feedback.")
    if task_cls.config_schema:
        check_values(task_node, task_cls.config_schema, "task.")
    check_values(reward_node, reward_schema, "reward.")
    check_reward_node(reward_node, imports=not recorded)

    # Every node holds what its schema allows: from here on the config is what is handed down,
    # instances of the schemas, each chosen group as its option's own schema; the checks across
    # groups read it as the code below the entry points will.
    run = instance(typed, EvalRunConfig if schema is EvalRunSchema else RunConfig,
                   types={"algo": algo_schema, "task": task_cls.config_schema or TaskConfig, "reward": reward_schema,
                          "feedback": feedback_schema})
    _validate_agents(run, task_cls)
    if task_cls.uses_sandbox:
        _validate_sandbox(run.sandbox)
    num_agents = ALGOS[algo_name].team(run).num_agents
    check_tree(run, num_agents)
    check_signalling(run, ALGOS[algo_name], num_agents)
    check_other_play(run, task_cls, num_agents)
    _validate_partners(run, num_agents)
    _validate_diversity(run)
    check_individual_reward(run, task_cls)
    # Two hooks, two scopes: a schema's static check_node(node, prefix) checks keys of its own node
    # (check_values above calls it); an algorithm's classmethod check_config(cfg, task_cls) checks the
    # whole config across groups (this algorithm with that task, topology, team) where a rule is its
    # own; the ones the algorithms share are below.
    algo_check = getattr(ALGOS[algo_name], "check_config", None)
    if algo_check is not None:
        algo_check(run, task_cls)
    if isinstance(run, EvalRunConfig):
        _validate_eval(run)
    elif run.resume:
        _validate_resume(run)
    return run


# -- the checks across groups that the algorithms share ------------------------------------------------


def check_individual_reward(cfg: RunConfig, task_cls: type[Task]) -> None:
    """`algo.reward=individual` needs a task whose reward splits per agent. Reward functions
    (`reward.fn`) split when they return per-agent lists: the trainer checks that before training
    (magrpo.tasks.reward_fns.check_splits)."""
    if reward_specs(cfg.reward):
        return
    if reward_kind(cfg.algo) == "individual" and not task_cls.splits_reward:
        raise ConfigError(f"algo.reward='individual' is not allowed for task {task_cls.name!r}: its reward "
                          f"is one team reward that does not split per agent; choose algo.reward=team")


def check_tree(cfg: RunConfig, num_agents: int) -> None:
    """Stop a configuration whose turn tree per item would exceed `algo.max_tree_nodes`."""
    a = cfg.algo
    topology, branching = a.topology, a.branching
    branching = list(branching) if branching else None
    if branching is not None and topology != "sequential":
        raise ConfigError(f"algo.branching={branching} sets the samples per prefix of a sequential team; "
                          f"set algo.topology=sequential, or algo.branching=null")
    if topology == "sequential":
        if a.joint_mode != "aligned":
            raise ConfigError(f"algo.joint_mode={a.joint_mode!r} pairs simultaneous samples; a sequential team's "
                              f"joint actions are the leaves of its chain: set algo.joint_mode=aligned")
        if branching is not None and num_agents > 1 and len(branching) != num_agents:
            raise ConfigError(f"algo.branching={branching} gives {len(branching)} level(s) for {num_agents} agents; "
                              f"give one number (samples per prefix) per agent")
        if branching is not None and min(branching) < 1:
            raise ConfigError(f"algo.branching={branching}: every level samples at least 1 answer per prefix")
    shape = (num_agents, a.num_generations, a.joint_mode, a.num_turns, a.max_branches, topology, branching)
    size = tree_size(*shape)
    if size > a.max_tree_nodes:
        raise ConfigError(
            f"algo.num_turns={a.num_turns} with algo.topology={topology!r}, algo.joint_mode={a.joint_mode!r}, "
            f"algo.num_generations={a.num_generations}, algo.branching={branching}, "
            f"{num_agents} agent(s) and algo.max_branches={a.max_branches} grows a tree "
            f"of {size} nodes per item ({sequences_per_item(*shape)} generated sequences), more than "
            f"algo.max_tree_nodes={a.max_tree_nodes}; cap it with "
            f"algo.max_branches, use fewer turns or generations, or raise algo.max_tree_nodes")


def check_signalling(cfg: RunConfig, algo_cls: type, num_agents: int) -> None:
    """Stop `algo.signal_agents` naming an agent the team lacks, and `algo.signal_bonus` on an
    algorithm that does not take its returns from `Episode.returns` (where the bonus is added)."""
    a = cfg.algo
    chosen = a.signal_agents
    if chosen is not None and not len(chosen):
        raise ConfigError(f"algo.signal_agents=[] names no agent; allowed: agent numbers 1..{num_agents}, "
                          f"or null for every agent")
    for k in chosen or ():
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= num_agents:
            raise ConfigError(f"algo.signal_agents={list(chosen or ())}: {k!r} is not an agent of this team; "
                              f"allowed: agent numbers 1..{num_agents}, or null for every agent")
    if a.signal_bonus > 0 and not getattr(algo_cls, "reads_returns", False):
        raise ConfigError(f"algo.signal_bonus={a.signal_bonus} is not read by algo.name={a.name} (its "
                          f"credit does not come from the team's returns); allowed with: {', '.join(return_readers())}")


def return_readers() -> list[str]:
    """The algorithms whose credit comes from `Episode.returns`, where `algo.signal_bonus` and the
    diversity term are added."""
    return sorted(n for n, c in ALGOS.items() if getattr(c, "reads_returns", False))


def check_other_play(cfg: RunConfig, task_cls: type[Task], num_agents: int) -> None:
    """`algo.other_play=true` needs partners to relabel (a team of 2 or more agents) and a task that
    declares the symmetries to relabel them by (Task.symmetries)."""
    if not cfg.algo.other_play:
        return
    if num_agents < 2:
        raise ConfigError(f"algo.other_play=true relabels each partner's view of the game, but algo.name="
                          f"{cfg.algo.name} trains a team of {num_agents} agent; use a team of 2 or more")
    if not task_cls(cfg.task, cfg.reward).symmetries():
        having = sorted(n for n in TASKS if _declares_symmetries(TASKS[n]))
        raise ConfigError(f"algo.other_play=true: task {cfg.task.name!r} declares no symmetry to relabel "
                          f"(Task.symmetries); tasks that do: {', '.join(having)}")


def _declares_symmetries(cls: type[Task]) -> bool:
    try:
        return bool(cls(cls.config_schema() if cls.config_schema else TaskConfig(),
                        cls.reward_schema() if cls.reward_schema else RewardConfig()).symmetries())
    except Exception:
        return False


def _validate_partners(cfg: RunConfig, num_agents: int) -> None:
    """`partners=` (magrpo.team.partners) on a team that has a role for a partner, `partner_roles` naming roles it has and
    leaving one to train (at validation, before anything loads)."""
    if not cfg.partners:
        if cfg.partner_roles is not None:
            raise ConfigError(f"partner_roles={list(cfg.partner_roles)} without partners=[...]: name the partners")
        return
    if num_agents < 2:
        raise ConfigError(f"partners: algo.name={cfg.algo.name} trains a team of {num_agents} agent (one model "
                          f"writes the whole answer), which has no role for a partner; algorithms with a role for "
                          f"one: every one with agents.num_agents >= 2")
    roles = cfg.partner_roles
    if roles is not None:
        bad = [r for r in roles if not isinstance(r, int) or isinstance(r, bool) or not 1 <= r <= num_agents]
        if bad or not roles or len(set(roles)) >= num_agents:
            raise ConfigError(f"partner_roles={list(roles)}: give the roles partners fill, numbered 1..{num_agents}, "
                              f"leaving at least one role to train; or null (one role per step, drawn)")


def _validate_diversity(cfg: RunConfig) -> None:
    """`diversity=` (magrpo.algos.diversity) only on an algorithm whose credit comes from the team's
    returns, where the term is added."""
    if not cfg.diversity:
        return
    algo_cls = ALGOS[cfg.algo.name]
    if not getattr(algo_cls, "reads_returns", False):
        raise ConfigError(f"diversity: algo.name={cfg.algo.name} does not read the diversity term (its credit does "
                          f"not come from the team's returns); allowed with: {', '.join(return_readers())}")


def _resolved(node: DictConfig) -> dict:
    """The node as plain data (its strings `literal`, so that a config created from it again keeps a
    resolved value that reads `${...}` as text); an interpolation that does not resolve is a
    ConfigError naming it."""
    try:
        return literal_strings(OmegaConf.to_container(node, resolve=True))
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        raise ConfigError(f"cannot resolve the config{f' at {key}' if key else ''}: "
                          f"{str(e).splitlines()[0]}") from None


def _validate_sandbox(node: SandboxSchema) -> None:
    """A named isolation level that cannot run here stops the run before any work (`auto` falls
    back instead, with a warning, when the task first runs code)."""
    if node.isolation == "auto":
        return

    try:
        isolation_level(node.isolation)
    except SandboxUnavailable as e:
        raise ConfigError(f"sandbox.isolation={node.isolation!r} cannot run here ({e}); choose one of: "
                          f"{', '.join(ISOLATION_CHOICES)} (auto takes the strongest that works)") from None


def _validate_resume(cfg: RunConfig) -> None:
    """`resume=` names a complete checkpoint (or a run directory holding one) of this very run."""
    if not cfg.resume:
        return
    ckpt = checkpoint.resolve(cfg.resume, "resume")
    cfg.resume = str(ckpt)
    checkpoint.check_resume(as_data(cfg), ckpt)


def _validate_agents(cfg: RunConfig, task_cls: type[Task]) -> None:
    agents = cfg.agents
    n = ALGOS[cfg.algo.name].team(cfg).num_agents
    models = agents.models
    if n > 1 and n not in task_cls.accepted_counts():
        raise ConfigError(f"agents.num_agents={n}: task {cfg.task.name!r} accepts {task_cls.describe_counts()} "
                          f"agents (1: one model writes the whole answer)")
    if len(models) == 0:
        raise ConfigError("agents.models is empty; give at least one model entry (name_or_path: ...)")
    if len(models) > agents.num_agents:
        raise ConfigError(f"agents.models has {len(models)} entries but agents.num_agents={agents.num_agents}; "
                          f"give one entry per agent, or one entry shared by all agents")
    if 1 < len(models) < agents.num_agents:
        raise ConfigError(f"agents.models has {len(models)} entries for agents.num_agents={agents.num_agents}; "
                          f"give one entry per agent, or a single entry shared by all agents")
    for i, spec in enumerate(models[:max(n, 1)] if len(models) > 1 else models):
        key = f"agents.models[{i}]"
        path = spec.name_or_path
        if path.startswith(BUILTIN_PREFIX) and path[len(BUILTIN_PREFIX):] not in BUILTIN_MODELS:
            raise ConfigError(f"{key}.name_or_path={path!r}: unknown builtin model; choose one of: "
                              + ", ".join(BUILTIN_PREFIX + k for k in sorted(BUILTIN_MODELS)))
        if looks_local(path) and not Path(path).expanduser().exists():
            raise ConfigError(f"{key}.name_or_path={path!r}: no such local model directory")
        if spec.tokenizer and looks_local(spec.tokenizer) and not Path(spec.tokenizer).expanduser().exists():
            raise ConfigError(f"{key}.tokenizer={spec.tokenizer!r}: no such local tokenizer directory")
        if agents.share_base and spec.lora is None:
            raise ConfigError(f"agents.share_base=true needs a LoRA config: {key}.lora is null")
    if agents.share_policy and agents.share_base:
        raise ConfigError("agents.share_policy=true and agents.share_base=true name two team levels at once; "
                          "choose one: share_policy (one policy plays every role) or share_base (a LoRA per role)")
    if agents.share_policy and len(models) > 1:
        raise ConfigError(f"agents.share_policy=true plays every role with ONE model, but agents.models has "
                          f"{len(models)} entries; give a single entry")
    if agents.share_base and len(models) > 1 and len({m.name_or_path for m in models}) > 1:
        raise ConfigError("agents.share_base=true needs every agent on the same base model; "
                          f"agents.models name {sorted({m.name_or_path for m in models})}")


def _validate_eval(cfg: EvalRunConfig) -> None:
    num_agents = ALGOS[cfg.algo.name].team(cfg).num_agents
    trained = cfg.checkpoint or cfg.team
    methods = list(cfg.methods) if cfg.methods is not None else (["team"] if trained else BASELINES)
    for m in methods:
        if m not in SCHEMES:
            raise ConfigError(f"methods contains {m!r}; choose from: {', '.join(SCHEMES)}")
        if m not in ("single", "team") and num_agents < 2:
            raise ConfigError(f"methods {'contains' if cfg.methods is not None else 'defaults to the baselines, with'} "
                              f"{m!r}, which needs at least 2 agents; algo={cfg.algo.name} "
                              f"with agents.num_agents={cfg.agents.num_agents} has {num_agents} "
                              f"(methods=[single] evaluates one model)")
    if len(set(cfg.methods or [])) != len(cfg.methods or []):
        raise ConfigError(f"methods={list(cfg.methods or [])} names a method twice")
    if cfg.methods is not None and len(cfg.methods) == 0:
        raise ConfigError("methods=[] evaluates nothing; give at least one of: " + ", ".join(SCHEMES)
                          + " (or null for the default)")
    if cfg.split not in ("eval", "train"):
        raise ConfigError(f"split={cfg.split!r} is not allowed; choose one of: eval, train")
    if cfg.checkpoint and cfg.team:
        raise ConfigError(f"checkpoint={cfg.checkpoint!r} and team={cfg.team!r} both name the weights to evaluate; "
                          f"give one")
    # team= is checked by magrpo.team.checks.check_team_option (magrpo-eval calls it after this).
    if cfg.checkpoint:
        if checkpoint.is_team_dir(cfg.checkpoint):
            raise ConfigError(f"checkpoint={cfg.checkpoint!r} is an exported team (team.json), not a training "
                              f"checkpoint; evaluate it with team={cfg.checkpoint}")
        ckpt = checkpoint.resolve(cfg.checkpoint, "checkpoint")
        checkpoint.check_agents_match(as_data(cfg), ckpt, ALGOS[cfg.algo.name].team(cfg).policy_dirs)
        cfg.checkpoint = str(ckpt)


class _open:
    """Temporarily lift struct mode so validated nodes of a free-form type can be attached."""

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg

    def __enter__(self):
        OmegaConf.set_struct(self.cfg, False)

    def __exit__(self, *exc):
        OmegaConf.set_struct(self.cfg, True)
