"""The algorithm contract: what the training loop may assume about any algorithm.

An algorithm is a class registered by name (`@register_algo("ippo")`) that declares
  * `config_schema`: ONE dataclass, the only source of its `algo.*` defaults and checks
    (the YAML under conf/algo/ holds only what differs from them);
  * `team(cfg)`: the team it needs -- how many policies, whether each needs a frozen reference,
    and whether the task is posed in its multi-agent or single-agent form;
  * optionally `check_config(cfg, task_cls)`, a classmethod: checks ACROSS groups of the typed config
    (this algorithm with that task, topology or team); one node's own keys: its schema's `check_node`;
and, once built from (cfg, agents, task), offers
  * `step(items) -> metrics` for one update on a batch of items, and
  * `state_dict()` / `load_state_dict()` covering every optimizer, scheduler, critic and
    controller it owns (the agents' weights are saved by the loop).
The loop (magrpo.trainer) never tests which algorithm it runs.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import torch
from omegaconf import OmegaConf

from magrpo import distributed
from magrpo.models import SHARED_POLICY, Agent, set_keys
from magrpo.registry import Registry, registrar
from magrpo.rollout import Rollout
from magrpo.schema import at_least, option, positive, within
from magrpo.tasks import Task

ALGOS: Registry[type[Algorithm]] = Registry("algorithm", "algo.name", set_name=True, builtins=tuple(
    f"magrpo.algos.{m}" for m in ("magrpo", "grpo", "ippo", "mappo", "ppo", "dr_mas", "at_grpo", "actor_critic", "c3")))


register_algo = registrar(ALGOS)


@dataclass
class AlgoConfig:
    """`algo.*` keys that every algorithm reads: how a batch is sampled and how big it is."""

    name: str = option("magrpo", choices=lambda: sorted(ALGOS))
    num_generations: int = at_least(2, 4, " (a group needs at least two samples)")  # G per agent per item
    joint_mode: str = option("aligned", choices=["aligned", "cross"])
    temperature: float = positive(1.0)
    top_p: float = within(0, 1, 1.0, lo_open=True)
    top_k: int = at_least(0, 0, " (0 = off)")
    max_new_tokens: int = at_least(1, 24)
    max_prompt_length: int = at_least(1, 1024)   # longer prompts (multi-turn histories) lose their beginning
    batch_size: int = at_least(1, 8)             # items per update
    micro_batch_size: int = at_least(1, 64)      # sequences per forward/backward (gradients accumulate)
    # Run each prompt once for its G samples, in generation and in the update (exact; a model
    # that cannot continue a shared key/value cache falls back with one log line).
    share_prompt: bool = True
    beta: float = at_least(0, 0.0)               # KL to the frozen reference (0 = none, no reference loaded)
    eval_every: int | None = option(None, check=lambda v: v is None or v >= 0, allowed=">= 0")  # deprecated: eval.every
    # The turn tree (magrpo/turns.py): T turns with feedback between them (the `feedback` group).
    num_turns: int = at_least(1, 1)
    discount: float = within(0, 1, 1.0)          # gamma in R = r + gamma * mean(children's R)
    early_termination_threshold: float | None = None   # a sibling set whose mean reward reaches it stops
    max_branches: int | None = option(None, check=lambda v: v >= 1, allowed=">= 1, or null = expand every node")
    max_tree_nodes: int = at_least(1, 2048)      # nodes of one item's tree; a bigger config stops at start
    # simultaneous: every agent answers at once; sequential: agent i sees the answers of 1..i-1 (a chain)
    topology: str = option("simultaneous", choices=["simultaneous", "sequential"])
    branching: list[int] | None = None           # sequential: samples per prefix of each agent (null = G each)


def check_tree(cfg: Any, num_agents: int) -> None:
    """Stop a configuration whose turn tree per item would exceed `algo.max_tree_nodes`."""
    from magrpo.schema import ConfigError
    from magrpo.turns import sequences_per_item, tree_size

    a = cfg.algo
    topology, branching = a.get("topology", "simultaneous"), a.get("branching")
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
    shape = (num_agents, a.num_generations, a.joint_mode, a.num_turns, a.get("max_branches"), topology, branching)
    size = tree_size(*shape)
    if size > a.max_tree_nodes:
        raise ConfigError(
            f"algo.num_turns={a.num_turns} with algo.topology={topology!r}, algo.joint_mode={a.joint_mode!r}, "
            f"algo.num_generations={a.num_generations}, algo.branching={branching}, "
            f"{num_agents} agent(s) and algo.max_branches={a.get('max_branches')} grows a tree "
            f"of {size} nodes per item ({sequences_per_item(*shape)} generated sequences), more than "
            f"algo.max_tree_nodes={a.max_tree_nodes}; cap it with "
            f"algo.max_branches, use fewer turns or generations, or raise algo.max_tree_nodes")


@dataclass(frozen=True)
class TeamSpec:
    """The team an algorithm builds. An agent is a role (its prompt, sampling and place in the
    topology); a policy is what trains (weights, optimizer, checkpoint). Separate models and a LoRA
    per role have one policy per agent; `agents.share_policy=true` has one policy for every role."""

    num_agents: int              # roles loaded: agents.num_agents, or 1 for the single-model form
    form: str = "multi"          # "multi": agent i answers prompt i; "single": one policy answers it all
    reference: bool = False      # a frozen reference per policy (a KL term)
    shared: bool = False         # one policy plays every role (agents.share_policy)

    @property
    def num_policies(self) -> int:
        return 1 if self.shared else self.num_agents

    @property
    def policy_dirs(self) -> list[str]:
        """Each policy's directory in a checkpoint: its agent's name, or `policy` when shared."""
        return [SHARED_POLICY] if self.shared else [f"agent_{i + 1}" for i in range(self.num_agents)]

    @classmethod
    def of(cls, cfg: Any, form: str) -> TeamSpec:
        n = 1 if form == "single" else cfg.agents.num_agents
        return cls(num_agents=n, form=form, reference=cfg.algo.beta > 0,
                   shared=bool(cfg.agents.get("share_policy")) and n > 1)


class Algorithm(Protocol):
    name: ClassVar[str]
    config_schema: ClassVar[type]

    @classmethod
    def team(cls, cfg: Any) -> TeamSpec: ...

    def __init__(self, cfg: Any, agents: list[Agent], task: Task) -> None: ...

    def step(self, items: list[dict]) -> dict[str, float]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


# --- pieces every algorithm's step uses --------------------------------------------------------------


def agent_optimizer(cfg: Any, agent: int) -> Any:
    """The `optimizer` settings of agent `agent` (0-based): the shared group with the non-null keys
    of agents.models[agent].optimizer on top (one models entry serves every agent)."""
    models = cfg.agents.models
    own = set_keys((models[agent] if agent < len(models) else models[0]).get("optimizer")) if len(models) else {}
    return OmegaConf.merge(cfg.optimizer, own) if own else cfg.optimizer


def agent_overrides(cfg: Any) -> dict[str, dict[str, Any]]:
    """Who -> the per-agent settings that differ from the shared groups (for summary.json): by
    agent name, or under "all" when one models entry serves every agent."""
    models = cfg.agents.models
    out = {}
    for i, spec in enumerate(models):
        own = {group: keys for group in ("optimizer", "sampling") if (keys := set_keys(spec.get(group)))}
        if own:
            out[f"agent_{i + 1}" if len(models) > 1 else "all"] = own
    return out


def build_optimizer(params: list[torch.nn.Parameter], opt_cfg: Any, total_steps: int, lr: float | None = None):
    """AdamW with linear warm-up, then a constant / linear / cosine schedule to 0 over `total_steps`."""
    optimizer = torch.optim.AdamW(params, lr=lr or opt_cfg.lr, betas=tuple(opt_cfg.betas), eps=opt_cfg.eps,
                                  weight_decay=opt_cfg.weight_decay)
    warmup, total = opt_cfg.warmup_steps, max(total_steps, 1)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        progress = min((step - warmup) / max(total - warmup, 1), 1.0)
        if opt_cfg.schedule == "linear":
            return 1.0 - progress
        if opt_cfg.schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        return 1.0

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def clip_and_step(params: list[torch.nn.Parameter], optimizer, scheduler, max_grad_norm: float | None) -> float:
    """Sum the gradients over data-parallel ranks, clip their norm (when set), step; returns the
    pre-clip norm (0 when clipping is off)."""
    distributed.sum_gradients(params)
    norm = 0.0
    if max_grad_norm is not None:
        norm = float(distributed.grad_norm(params))     # sharded (fsdp) and plain gradients together
        coef = min(max_grad_norm / (norm + 1e-6), 1.0)  # as torch.nn.utils.clip_grad_norm_
        if coef < 1.0:
            with torch.no_grad():
                for p in params:
                    if p.grad is not None:
                        p.grad.mul_(coef)
    optimizer.step()
    scheduler.step()
    return norm


def reward_metrics(rollout: Rollout, prefix: str = "train") -> dict[str, float]:
    """Team-level reward metrics of a scored rollout and the turns grown from it, over every rank's
    items: reward_mean/std and components over every node of every turn (what the loss sees), the
    same per turn (`turn_{t}/...`), and `frac_reward_zero_std`: the share of sibling sets whose
    rewards are all equal, i.e. carry no signal."""
    levels = rollout.levels()
    rewards = [distributed.gather_cat(lv.rewards) for lv in levels]
    R = torch.cat([r.flatten() for r in rewards])
    flat = torch.cat([r.std(-1, unbiased=False) for r in rewards])
    m = {f"{prefix}/reward_mean": R.mean().item(), f"{prefix}/reward_std": R.std(unbiased=False).item(),
         f"{prefix}/frac_reward_zero_std": (flat < 1e-8).float().mean().item()}
    names = list(dict.fromkeys(k for lv in levels for k in lv.scores.components))
    for name in names:
        values = [x for lv in levels for x in lv.scores.components.get(name, [])]
        m[f"{prefix}/reward/{name}"] = sum(values) / max(len(values), 1)
    for lv in levels:
        m[f"{prefix}/turn_{lv.turn}/reward_mean"] = lv.rewards.mean().item()
        for name, values in lv.scores.components.items():
            m[f"{prefix}/turn_{lv.turn}/reward/{name}"] = sum(values) / max(len(values), 1)
    return m


# Seconds spent in the learning computation of the current step (`_update`, `_prepare`): the
# `update` phase of timing_metrics, accumulated by @update_phase and read once per step.
_UPDATE_SECONDS = [0.0]


def update_phase(fn: Callable) -> Callable:
    """Count a method's wall time as the step's `update` phase (forward/backward/optimizer work)."""
    @functools.wraps(fn)
    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _UPDATE_SECONDS[0] += time.perf_counter() - t0

    return timed


def timing_metrics(rollout: Rollout | list[Rollout], t0: float, t_gen: float, t_reward: float, t_end: float,
                   feedback_s: float = 0.0) -> dict[str, float]:
    """Lengths and phase times of one step: `generate` (the models' decoding, every turn),
    `reward` (scoring), `feedback` (between turns), `update` (@update_phase methods) and `other`
    (the rest: tokenization, decoding to text, advantages, metrics), which sum to the step time;
    and the throughput. `t_gen - t0` is the generation time of every turn and `t_reward - t_gen`
    the scoring and, in multi-turn steps, the feedback (`feedback_s` of it). Several rollouts (the
    rounds of dynamic sampling) count together; `sequences_per_item` is every generated sequence
    per item of the batch (the first rollout's items), the step's generation budget."""
    roots = rollout if isinstance(rollout, list) else [rollout]
    levels = [lv for root in roots for lv in root.levels()]
    gens = [g for lv in levels for g in lv.samples]
    n_tokens = sum(g.lengths.sum().item() for g in gens)
    n_rows = sum(len(g.texts) for g in gens)
    m = {}
    for i in range(len(roots[0].samples)):
        mine = [lv.samples[i] for lv in levels]
        m[f"train/agent_{i + 1}/completions/mean_length"] = (sum(g.lengths.sum().item() for g in mine)
                                                            / max(sum(len(g.texts) for g in mine), 1))
    step = t_end - t0
    generate = sum(g.sample_seconds for g in gens) or (t_gen - t0)
    update = _UPDATE_SECONDS[0] or (t_end - t_reward)
    _UPDATE_SECONDS[0] = 0.0
    reward = max(t_reward - t_gen - feedback_s, 0.0)
    m.update({
        "train/completions/mean_length": n_tokens / max(n_rows, 1), "train/completions/tokens": float(n_tokens),
        "time/generate_s": generate, "time/reward_s": reward, "time/feedback_s": feedback_s,
        "time/update_s": update,
        "time/other_s": max(step - generate - reward - feedback_s - update, 0.0),
        "time/step_s": step, "speed/tokens_per_s": n_tokens / step,
        "speed/prompts_per_s": roots[0].num_items / step,
        "train/sequences_per_item": n_rows / max(roots[0].num_items, 1),
    })
    return m
