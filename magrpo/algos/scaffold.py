"""The scaffold every team algorithm stands on, so that each algorithm's file holds only its math.

One step of any algorithm is

    episode = self.collect(inp)               # grow the turn tree of inp.items, score it (magrpo.rollout.turns)
    for each policy:                          # a shared policy gathers every role it plays
        signal = <the algorithm's advantages> # from episode.returns(...), a critic, ...
        <the algorithm's update>              # one optimizer step or PPO epochs
    return episode.finish()                   # reward, tree and timing metrics

`TeamAlgorithm` holds the set-up (sampling, turns, feedback, one optimizer per policy), `collect`,
the per-policy assembly of generations (`policy_batches`) and the optimizer state; `Episode` is
the scored tree with the questions every algorithm asks of it: a role's returns per turn, a role's
rows across turns, and the item each row descends from. The config checks across groups that the
algorithms share (the turn tree's size, individual rewards, signalling, Other-Play) are
magrpo.validation.checks's.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, NamedTuple, TypeGuard, TypeVar

import torch

from magrpo.algos.base import StepInput, StepSpecs, TeamSpec
from magrpo.algos.critics import CriticModule
from magrpo.algos.diversity import Diversity
from magrpo.algos.optim import agent_optimizer, build_optimizer
from magrpo.algos.signalling import pointwise_mi, row_prompts
from magrpo.algos.step_metrics import UpdateClock, reward_metrics, timing_metrics
from magrpo.config.groups import AlgoConfig
from magrpo.config.run import RunConfig
from magrpo.models.agents import Agent, policy_agents, policy_groups
from magrpo.rollout.record import Generation, Rollout, credit
from magrpo.rollout.turns import TreeStats, concat_generations, grow_tree, tree_metrics, tree_returns
from magrpo.tasks import Task


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
    cache: dict[Hashable, Any] = field(default_factory=dict)      # what an algorithm computes once per step
    clock: UpdateClock | None = None     # the algorithm's update phase, taken by `finish`
    # positive signalling (magrpo.algos.signalling): lam, and the agents (0-based) it is added for
    signal_bonus: float = 0.0
    signal_agents: tuple[int, ...] = ()
    # the population's diversity term (magrpo.algos.diversity), or None
    diversity: Diversity | None = None
    # the roles frozen partners played in this step (StepInput.seat): role index -> the partner's agent
    seat: dict[int, Agent] = field(default_factory=dict)

    @property
    def root(self) -> Rollout:
        return self.roots[0]

    def levels(self) -> list[Rollout]:
        """Every turn of every tree, tree by tree: the order of each role's rows."""
        return [lv for root in self.roots for lv in root.levels()]

    def returns(self, agent: int, discount: float, reward: str = "team", cross_credit: str = "mean") -> list[torch.Tensor]:
        """Per turn of every tree, [B_t, S_i] the return of each of agent `agent`'s samples: the
        discounted tree return of its joint actions (magrpo.rollout.turns.tree_returns), of the team reward
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
            if self.diversity is None:
                raise ValueError("Episode.novelty: this step has no diversity term (StepInput.diversity)")
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
            self.cache[key] = torch.tensor(self.task.individual_rewards(level.scored, self.num_agents))
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


class CriticParts(NamedTuple):
    """A critic as `build_critics` returns it: the module whose state the checkpoint carries and
    what steps it. A separate critic model has its own optimizer and schedule; a head
    (`kind == "head"`) has None here and trains in its policy's optimizer (`extra_parameters`)."""

    module: CriticModule
    optimizer: Any = None
    scheduler: Any = None


# The `algo` config of an algorithm: its schema (`config_schema`), a subclass of AlgoConfig.
A = TypeVar("A", bound=AlgoConfig)


class TeamAlgorithm(Generic[A]):
    """Set-up, collection, per-policy assembly and optimizer state shared by every algorithm.

    Generic over the algorithm's `algo` schema: a subclass names it (`class IPPO(TeamAlgorithm[IPPOConfig])`)
    and sets `config_schema` to it, so `self.algo` is that schema's instance (`self.algo.vf_coef`;
    checked when it is built: `reads`); a subclass of an algorithm whose schema adds keys declares
    `algo: ItsConfig` beside its `config_schema`. Subclasses set `form = "single"` for one model
    writing the whole answer, and write `step` as advantages, then update. `build_critics` (an actor-critic method's
    critics, each with its optimizer: `critic_parts`), `steps_per_update` (optimizer steps per
    training step, for the learning-rate schedule) and `extra_parameters` (what trains with a
    policy besides its weights, e.g. a value head) are the hooks of the set-up; `extra_state` /
    `load_extra_state` carry what else a checkpoint must hold.
    """

    config_schema: ClassVar[type[AlgoConfig]] = AlgoConfig    # the `algo` schema, set by each algorithm
    form: ClassVar[str] = "multi"
    name: ClassVar[str]
    # whether its credit comes from `Episode.returns` (so `algo.signal_bonus` and the diversity term reach it)
    reads_returns: ClassVar[bool] = False

    @classmethod
    def team(cls, cfg: RunConfig) -> TeamSpec:
        return TeamSpec.of(cfg, cls.form)

    def reads(self, algo: AlgoConfig) -> TypeGuard[A]:
        """Whether `algo` is this algorithm's config: an instance of its `config_schema`."""
        return isinstance(algo, type(self).config_schema)

    def __init__(self, cfg: RunConfig, agents: list[Agent], task: Task, specs: StepSpecs | None = None):
        """`specs`: the step's sampling, turns and feedback as the training loop built them (None:
        built here from the config, for an algorithm used without the loop)."""
        algo = cfg.algo
        if not self.reads(algo):
            raise TypeError(f"{type(self).__name__} reads an algo config of {self.config_schema.__name__}; this "
                            f"config's algo (algo.name={algo.name!r}) is a {type(algo).__name__}")
        self.cfg, self.algo, self.agents, self.task = cfg, algo, agents, task
        self.update_clock = UpdateClock()      # the step's `update` phase (@update_phase methods)
        self.policies = policy_agents(agents)
        self.roles = policy_groups(agents)
        # Critics (actor-critic methods), built before anything else draws from the random
        # generator, each with what steps it (CriticParts).
        critics = self.build_critics()
        self.critics: list[CriticModule] = [c.module for c in critics]
        self.critic_optimizers: list[Any] = [c.optimizer for c in critics]
        self.critic_schedulers: list[Any] = [c.scheduler for c in critics]
        specs = specs if specs is not None else StepSpecs.of(cfg, task)
        self.sampling, self.turns, self.feedback = specs.sampling, specs.turns, specs.feedback
        # One optimizer per policy: a shared policy (agents.share_policy) steps once for all its roles.
        built = [build_optimizer(p.trainable_parameters() + self.extra_parameters(k), agent_optimizer(cfg, p.index),
                                 self.total_steps()) for k, p in enumerate(self.policies)]
        self.optimizers = [o for o, _ in built]
        self.schedulers = [s for _, s in built]

    def players(self, seat: dict[int, Agent]) -> list[Agent]:
        """The agents that play a step's rollouts: the team's own, a partner in each seated role."""
        return [seat.get(a.index, a) for a in self.agents]

    def trained_roles(self, policy: int, seat: dict[int, Agent]) -> list[Agent]:
        """The roles policy `policy` plays and trains on a step (a partner's seated role is not its)."""
        return [a for a in self.roles[policy] if a.index not in seat]

    def total_steps(self) -> int:
        """Optimizer steps over the run: the length of every learning-rate schedule."""
        return self.cfg.max_steps * self.steps_per_update()

    def critic_parts(self, critic: CriticModule, owner: Agent, lr: float | None) -> CriticParts:
        """`critic` with what steps it: a separate model (`kind != "head"`) gets an optimizer with the
        settings of the policy it serves (`owner`) and its own learning rate `lr` (null: the
        policy's); a head trains in its policy's optimizer."""
        if critic.kind == "head":
            return CriticParts(critic)
        return CriticParts(critic, *build_optimizer(list(critic.parameters()), agent_optimizer(self.cfg, owner.index),
                                                     self.total_steps(), lr=lr))

    @functools.cached_property
    def signalling(self) -> dict[str, Any]:
        """Episode's positive-signalling fields from `algo.signal_bonus` / `algo.signal_agents`
        (read once: the keys do not change during a run)."""
        lam = float(self.algo.signal_bonus)
        chosen = self.algo.signal_agents
        agents = tuple(range(len(self.agents))) if chosen is None else tuple(int(k) - 1 for k in chosen)
        return {"signal_bonus": lam, "signal_agents": agents}

    # -- hooks of the set-up ------------------------------------------------------------------------
    def build_critics(self) -> list[CriticParts]:
        """The algorithm's critics with their optimizers (`critic_parts`), built once `self.policies`
        and `self.roles` are known and before the policies' optimizers (a head critic's parameters
        join its policy's); none by default."""
        return []

    def steps_per_update(self) -> int:
        return 1

    def extra_parameters(self, policy: int) -> list[torch.nn.Parameter]:
        return []

    # -- one episode --------------------------------------------------------------------------------
    def grow(self, items: list[dict], seat: dict[int, Agent]) -> tuple[Rollout, TreeStats]:
        """One scored turn tree of `items` (the algorithm's sampling, turns and topology), partners
        playing the roles `seat` gives them."""
        return grow_tree(self.players(seat), self.task, self.feedback, items, self.sampling, self.turns)

    def collect(self, inp: StepInput) -> Episode:
        t0 = time.perf_counter()
        root, stats = self.grow(inp.items, inp.seat)
        ep = Episode([root], stats, self.task, len(self.agents), t0, t0 + stats.generate_s, time.perf_counter(),
                     clock=self.update_clock, diversity=inp.diversity, seat=inp.seat, **self.signalling)
        ep.metrics.update(reward_metrics(root))
        if self.turns.num_turns > 1:
            ep.metrics.update(tree_metrics(root, stats))
        return ep

    def policy_batches(self, ep: Episode, per_role: Callable[[Agent], Any]) -> Iterator[tuple[int, Agent, Generation, Any]]:
        """For each policy: (index, its agent, the rows of every role it plays as one Generation,
        `per_role(role)` of each role concatenated). `per_role` returns a tensor per row, or a tuple
        of them; each role's values are computed within its own groups before they are joined."""
        for p in range(len(self.roles)):
            roles = self.trained_roles(p, ep.seat)
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
        state: dict[str, Any] = {"optimizers": [o.state_dict() for o in self.optimizers],
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
