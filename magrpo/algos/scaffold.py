"""The scaffold every team algorithm stands on, so that each algorithm's file holds only its math.

One step of any algorithm is

    episode = self.collect(items)             # grow the turn tree, score it (magrpo.turns)
    for each policy:                          # a shared policy gathers every role it plays
        signal = <the algorithm's advantages> # from episode.returns(...), a critic, ...
        <the algorithm's update>              # one optimizer step or PPO epochs
    return episode.finish()                   # reward, tree and timing metrics

`TeamAlgorithm` holds the set-up (sampling, turns, feedback, one optimizer per policy), `collect`,
the per-policy assembly of generations (`policy_batches`) and the optimizer state; `Episode` is
the scored tree with the questions every algorithm asks of it: a role's returns per turn, a role's
rows across turns, and the item each row descends from. The config checks the algorithms share
(`check_tree`, `check_individual_reward`) sit here too.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from magrpo.algos.base import ALGOS, TeamSpec
from magrpo.algos.diversity import Diversity
from magrpo.algos.keys import reward_kind
from magrpo.algos.optim import agent_optimizer, build_optimizer
from magrpo.algos.signalling import pointwise_mi, row_prompts
from magrpo.algos.step_metrics import UpdateClock, reward_metrics, timing_metrics
from magrpo.feedback import build_feedback
from magrpo.models import Agent, policy_agents, policy_groups
from magrpo.rollout import Generation, Rollout, Sampling, credit
from magrpo.schema import ConfigError
from magrpo.tasks import TASKS, Task
from magrpo.tasks.reward_fns import reward_specs
from magrpo.turns import (
    TreeStats,
    TurnSpec,
    concat_generations,
    grow_tree,
    sequences_per_item,
    tree_metrics,
    tree_returns,
    tree_size,
)


def check_individual_reward(cfg: Any, task_cls: type[Task]) -> None:
    """`algo.reward=individual` needs a task whose reward splits per agent. Reward functions
    (`reward.fn`) split when they return per-agent lists: the trainer checks that before training
    (magrpo.tasks.reward_fns.check_splits)."""
    if reward_specs(cfg.reward):
        return
    if reward_kind(cfg.algo) == "individual" and not task_cls.splits_reward:
        raise ConfigError(f"algo.reward='individual' is not allowed for task {task_cls.name!r}: its reward "
                          f"is one team reward that does not split per agent; choose algo.reward=team")


def check_tree(cfg: Any, num_agents: int) -> None:
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


def check_signalling(cfg: Any, algo_cls: type, num_agents: int) -> None:
    """Stop `algo.signal_agents` naming an agent the team lacks, and `algo.signal_bonus` on an
    algorithm that does not take its returns from `Episode.returns` (where the bonus is added)."""
    a = cfg.algo
    chosen = a.signal_agents
    if chosen is not None and not len(chosen):
        raise ConfigError(f"algo.signal_agents=[] names no agent; allowed: agent numbers 1..{num_agents}, "
                          f"or null for every agent")
    for k in chosen or ():
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= num_agents:
            raise ConfigError(f"algo.signal_agents={list(chosen)}: {k!r} is not an agent of this team; "
                              f"allowed: agent numbers 1..{num_agents}, or null for every agent")
    if a.signal_bonus > 0 and not getattr(algo_cls, "reads_returns", False):
        raise ConfigError(f"algo.signal_bonus={a.signal_bonus} is not read by algo.name={a.name} (its "
                          f"credit does not come from the team's returns); allowed with: {', '.join(return_readers())}")


def return_readers() -> list[str]:
    """The algorithms whose credit comes from `Episode.returns`, where `algo.signal_bonus` and the
    diversity term are added."""
    return sorted(n for n, c in ALGOS.items() if getattr(c, "reads_returns", False))


def check_other_play(cfg: Any, task_cls: type, num_agents: int) -> None:
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


def _declares_symmetries(cls: type) -> bool:
    try:
        return bool(cls(cls.config_schema() if cls.config_schema else None,
                        cls.reward_schema() if cls.reward_schema else None).symmetries())
    except Exception:
        return False


def group_items(root: Rollout) -> list[torch.Tensor]:
    """Per turn of a tree, [B_t]: the item of `root` that each group (sibling set) descends from."""
    out, of_group, prev_joint = [], torch.arange(root.num_items), root.num_joint
    for lv in root.levels():
        if lv.parents is not None:           # group g continues node parents[g] of the previous turn
            of_group = of_group[lv.parents // prev_joint]
        out.append(of_group)
        prev_joint = lv.num_joint
    return out


@dataclass
class Episode:
    """A scored turn tree of one batch (or several, when dynamic sampling drew more) and its metrics."""

    roots: list[Rollout]
    stats: TreeStats
    task: Task
    num_agents: int
    t0: float
    t_gen: float
    t_reward: float
    metrics: dict[str, float] = field(default_factory=dict)
    cache: dict[str, Any] = field(default_factory=dict)      # what an algorithm computes once per step
    clock: UpdateClock | None = None     # the algorithm's update phase, taken by `finish`
    # positive signalling (magrpo.algos.signalling): lam, and the agents (0-based) it is added for
    signal_bonus: float = 0.0
    signal_agents: tuple[int, ...] = ()
    # the population's diversity term (magrpo.algos.diversity), or None
    diversity: Diversity | None = None

    @property
    def root(self) -> Rollout:
        return self.roots[0]

    def levels(self) -> list[Rollout]:
        """Every turn of every tree, tree by tree: the order of each role's rows."""
        return [lv for root in self.roots for lv in root.levels()]

    def returns(self, agent: int, discount: float, reward: str = "team", cross_credit: str = "mean") -> list[torch.Tensor]:
        """Per turn of every tree, [B_t, S_i] the return of each of agent `agent`'s samples: the
        discounted tree return of its joint actions (magrpo.turns.tree_returns), of the team reward
        or (`reward="individual"`) of the agent's own share, credited to its samples (`credit`)."""
        out = []
        for root in self.roots:
            levels = root.levels()
            own = [self.turn_shares(lv, agent) for lv in levels] if reward == "individual" else None
            node_returns = tree_returns(root, discount, own)
            out += [credit(R, lv.joint, agent, lv.per_item(agent), cross_credit) for R, lv in zip(node_returns, levels)]
        if self.signal_bonus > 0 and agent in self.signal_agents:
            out = [R + self.signal_bonus * self.pmi(lv, agent).view_as(R) for R, lv in zip(out, self.levels())]
        if self.diversity is not None and self.diversity.coef > 0:
            out = [R + self.diversity.coef * self.novelty(lv, agent).view_as(R) for R, lv in zip(out, self.levels())]
        return out

    def novelty(self, level: Rollout, agent: int) -> torch.Tensor:
        """[B_t * S_i] -log pibar of each of agent `agent`'s samples of one turn under the earlier
        members' mixture (magrpo.algos.diversity), computed once per step; its mean is logged as
        train/agent_<k>/diversity_nll."""
        key = ("novelty", id(level), agent)
        if key not in self.cache:
            nll = self.diversity.nll(level.samples[agent], agent)
            self.cache[key] = nll
            if level is self.root:
                self.metrics[f"train/agent_{agent + 1}/diversity_nll"] = nll.mean().item()
        return self.cache[key]

    def pmi(self, level: Rollout, agent: int) -> torch.Tensor:
        """[B_t * S_i] pmi(move; prompt) in bits of each of agent `agent`'s samples of one turn
        (magrpo.algos.signalling), counted once per step; its mean is logged as
        train/agent_<k>/signal_info_bits."""
        key = ("pmi", id(level), agent)
        if key not in self.cache:
            gen = level.samples[agent]
            pmi = pointwise_mi(row_prompts(gen.prompts, len(gen.texts)), [self.task.move(t) for t in gen.texts])
            self.cache[key] = pmi
            if level is self.root:
                self.metrics[f"train/agent_{agent + 1}/signal_info_bits"] = pmi.mean().item()
        return self.cache[key]

    def turn_shares(self, level: Rollout, agent: int) -> torch.Tensor:
        """[B_t, J] agent `agent`'s own share of each joint reward of one turn (`individual_rewards`)."""
        key = id(level)
        if key not in self.cache:
            self.cache[key] = torch.tensor(self.task.individual_rewards(level.scores, self.num_agents))
        return self.cache[key][:, agent].view(level.num_items, -1)

    def generation(self, agent: Agent) -> Generation:
        """The agent's samples of every turn of every tree as one Generation (rows in `levels()` order)."""
        return concat_generations([lv.samples[agent.index] for lv in self.levels()], agent.tokenizer.pad_token_id)

    def row_items(self, agent: int) -> list[torch.Tensor]:
        """Per turn of every tree, [B_t * S_i]: the batch item each of agent `agent`'s rows descends
        from (across trees, items are numbered on: tree k's items follow tree k-1's)."""
        out, offset = [], 0
        for root in self.roots:
            for lv, items in zip(root.levels(), group_items(root)):
                out.append((items + offset).repeat_interleave(lv.per_item(agent)))
            offset += root.num_items
        return out

    def finish(self) -> dict[str, float]:
        """The step's metrics, with the timing of its phases (the update phase measured so far)."""
        update_s = self.clock.take() if self.clock is not None else 0.0
        self.metrics.update(timing_metrics(self.roots, self.t0, self.t_gen, self.t_reward, time.perf_counter(),
                                           self.stats.feedback_s, update_s))
        return self.metrics


class TeamAlgorithm:
    """Set-up, collection, per-policy assembly and optimizer state shared by every algorithm.

    Subclasses set `config_schema` (and `form = "single"` for one model writing the whole answer),
    and write `step` as advantages, then update. `build_critics` (an actor-critic method's
    critics), `steps_per_update` (optimizer steps per training step, for the learning-rate
    schedule) and `extra_parameters` (what trains with a policy besides its weights, e.g. a value
    head) are the hooks of the set-up; `extra_state` / `load_extra_state`
    carry what else a checkpoint must hold.
    """

    config_schema: ClassVar[type]
    form: ClassVar[str] = "multi"
    name: ClassVar[str]
    # whether its credit comes from `Episode.returns` (so `algo.signal_bonus` and the diversity term reach it)
    reads_returns: ClassVar[bool] = False

    @classmethod
    def team(cls, cfg: Any) -> TeamSpec:
        return TeamSpec.of(cfg, cls.form)

    def __init__(self, cfg: Any, agents: list[Agent], task: Task):
        self.cfg, self.algo, self.agents, self.task = cfg, cfg.algo, agents, task
        self.update_clock = UpdateClock()      # the step's `update` phase (@update_phase methods)
        self.policies = policy_agents(agents)
        self.roles = policy_groups(agents)
        # Critics (actor-critic methods, `build_critics`): modules whose state the checkpoint carries;
        # a separate critic model has its own optimizer (`attach_critics`), a head trains with its
        # policy (`extra_parameters`). Built before anything else draws from the random generator.
        self.critics: list[torch.nn.Module] = self.build_critics()
        self.sampling = Sampling.from_algo(cfg.algo)
        self.turns = TurnSpec.from_algo(cfg.algo)
        self.feedback = build_feedback(cfg.feedback, task)
        # One optimizer per policy: a shared policy (agents.share_policy) steps once for all its roles.
        total = cfg.max_steps * self.steps_per_update()
        built = [build_optimizer(p.trainable_parameters() + self.extra_parameters(k), agent_optimizer(cfg, p.index),
                                 total) for k, p in enumerate(self.policies)]
        self.optimizers = [o for o, _ in built]
        self.schedulers = [s for _, s in built]
        self.critic_optimizers: list[Any] = [None] * len(self.critics)
        self.critic_schedulers: list[Any] = [None] * len(self.critics)
        # Dynamic sampling draws more items through this, when the training loop provides it:
        # refill(round, n) -> n items (magrpo.trainer); without it the same items are sampled again.
        self.refill: Callable[[int, int], list[dict]] | None = None
        # Frozen partners (magrpo.partners): role index -> the partner's agent that plays that role in
        # this step's rollouts. Set by the training loop before each step; a role a partner fills is
        # not updated (its policy's other roles are).
        self.seat: dict[int, Agent] = {}
        # The population's diversity term (magrpo.algos.diversity): the earlier members, set by the
        # training loop before the first step when `diversity=[...]` names them.
        self.diversity: Diversity | None = None

    @property
    def players(self) -> list[Agent]:
        """The agents that play this step's rollouts: the team's own, a partner in each seated role."""
        return [self.seat.get(a.index, a) for a in self.agents]

    def trained_roles(self, policy: int) -> list[Agent]:
        """The roles policy `policy` plays and trains on this step (a partner's role is not its)."""
        return [a for a in self.roles[policy] if a.index not in self.seat]

    def attach_critics(self, owners: list[Agent], lr: float | None) -> None:
        """An optimizer for each critic that is a separate model (`kind != "head"`), with the
        settings of the policy it serves (`owners[k]`) and its own learning rate `lr` (null: the
        policy's)."""
        total = self.cfg.max_steps * self.steps_per_update()
        for k, (owner, critic) in enumerate(zip(owners, self.critics)):
            if critic.kind != "head":
                self.critic_optimizers[k], self.critic_schedulers[k] = build_optimizer(
                    list(critic.parameters()), agent_optimizer(self.cfg, owner.index), total, lr=lr)

    @functools.cached_property
    def signalling(self) -> dict[str, Any]:
        """Episode's positive-signalling fields from `algo.signal_bonus` / `algo.signal_agents`
        (read once: the keys do not change during a run)."""
        lam = float(self.algo.signal_bonus)
        chosen = self.algo.signal_agents
        agents = tuple(range(len(self.agents))) if chosen is None else tuple(int(k) - 1 for k in chosen)
        return {"signal_bonus": lam, "signal_agents": agents}

    # -- hooks of the set-up ------------------------------------------------------------------------
    def build_critics(self) -> list[torch.nn.Module]:
        """The algorithm's critics, built once `self.policies` and `self.roles` are known and before
        the optimizers (a head critic's parameters join its policy's optimizer); none by default."""
        return []

    def steps_per_update(self) -> int:
        return 1

    def extra_parameters(self, policy: int) -> list[torch.nn.Parameter]:
        return []

    # -- one episode --------------------------------------------------------------------------------
    def grow(self, items: list[dict]) -> tuple[Rollout, TreeStats]:
        """One scored turn tree of `items` (the algorithm's sampling, turns and topology)."""
        return grow_tree(self.players, self.task, self.feedback, items, self.sampling, self.turns)

    def collect(self, items: list[dict]) -> Episode:
        t0 = time.perf_counter()
        root, stats = self.grow(items)
        ep = Episode([root], stats, self.task, len(self.agents), t0, t0 + stats.generate_s, time.perf_counter(),
                     clock=self.update_clock, diversity=self.diversity, **self.signalling)
        ep.metrics.update(reward_metrics(root))
        if self.turns.num_turns > 1:
            ep.metrics.update(tree_metrics(root, stats))
        return ep

    def policy_batches(self, ep: Episode, per_role: Callable[[Agent], Any]) -> Iterator[tuple[int, Agent, Generation, Any]]:
        """For each policy: (index, its agent, the rows of every role it plays as one Generation,
        `per_role(role)` of each role concatenated). `per_role` returns a tensor per row, or a tuple
        of them; each role's values are computed within its own groups before they are joined."""
        for p in range(len(self.roles)):
            roles = self.trained_roles(p)
            if not roles:                    # every role of this policy is a partner's this step
                continue
            parts = [per_role(agent) for agent in roles]
            gen = concat_generations([ep.generation(a) for a in roles], roles[0].tokenizer.pad_token_id)
            if isinstance(parts[0], tuple):
                yield p, roles[0], gen, tuple(torch.cat(x) for x in zip(*parts))
            else:
                yield p, roles[0], gen, torch.cat(parts)

    @staticmethod
    def log_policy(ep: Episode, policy: Agent, stats: dict[str, float]) -> None:
        ep.metrics.update({f"train/{policy.policy_name}/{k}": v for k, v in stats.items()})

    # -- checkpoint state ---------------------------------------------------------------------------
    def extra_state(self) -> dict:
        return {}

    def load_extra_state(self, state: dict) -> None:
        pass

    def state_dict(self) -> dict:
        state = {"optimizers": [o.state_dict() for o in self.optimizers],
                 "schedulers": [s.state_dict() for s in self.schedulers]}
        if self.critics:
            state.update({"critics": [c.state_dict() for c in self.critics],
                          "critic_optimizers": [o.state_dict() if o else None for o in self.critic_optimizers],
                          "critic_schedulers": [s.state_dict() if s else None for s in self.critic_schedulers]})
        return {**state, **self.extra_state()}

    def load_state_dict(self, state: dict) -> None:
        for group in ("optimizers", "schedulers", *(("critics", "critic_optimizers", "critic_schedulers")
                                                     if self.critics else ())):
            for obj, s in zip(getattr(self, group), state[group]):
                if obj is not None:
                    obj.load_state_dict(s)
        self.load_extra_state(state)
