"""The algorithm contract: what the training loop may assume about any algorithm.

An algorithm is a class registered by name (`@register_algo("ippo")`) that declares
  * `config_schema`: ONE dataclass, the only source of its `algo.*` defaults and checks
    (the YAML under conf/algo/ holds only what differs from them);
  * `team(cfg)`: the team it needs -- how many policies, whether each needs a frozen reference,
    and whether the task is posed in its multi-agent or single-agent form;
  * optionally `check_config(cfg, task_cls)`, a classmethod: checks ACROSS groups of the typed config
    (this algorithm with that task, topology or team); one node's own keys: its schema's `check_node`;

and, once built from (cfg, agents, task, specs), offers
  * `step(StepInput) -> metrics` for one update on a batch of items: the one call between the loop
    and the algorithm, holding everything the loop hands it for the step (the items, the partners
    seated this step, where more items come from, the population's diversity term), and
  * `state_dict()` / `load_state_dict()` covering every optimizer, scheduler, critic and
    controller it owns (the agents' weights are saved by the loop).

`StepSpecs` (how a step samples, grows its turn tree and shows feedback) is built once from the
config by the loop, which evaluates with the same turns and feedback, and handed to the algorithm.
The loop (magrpo.training.trainer) never tests which algorithm it runs, and sets nothing on it.

This module is the contract alone. What the built-in algorithms share to keep it lives beside it:
the set-up, collection and checkpoint state in `scaffold.py` (TeamAlgorithm, Episode, the turn-tree
check), the optimizers in `optim.py`, and the step's reward and timing metrics in `step_metrics.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from magrpo.algos.diversity import Diversity
from magrpo.config.groups import AlgoConfig
from magrpo.config.run import RunConfig
from magrpo.core.registry import Registry, registrar
from magrpo.models.agents import SHARED_POLICY, Agent
from magrpo.rollout.feedback import Feedback, build_feedback
from magrpo.rollout.record import Sampling
from magrpo.rollout.turns import TurnSpec
from magrpo.tasks import Task

ALGOS: Registry[type[Algorithm]] = Registry("algorithm", "algo.name", set_name=True, builtins=tuple(
    f"magrpo.algos.{m}" for m in ("magrpo", "grpo", "ippo", "mappo", "ppo", "dr_mas", "at_grpo", "actor_critic", "c3")))


register_algo = registrar(ALGOS)




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
    def of(cls, cfg: RunConfig, form: str) -> TeamSpec:
        n = 1 if form == "single" else cfg.agents.num_agents
        return cls(num_agents=n, form=form, reference=cfg.algo.beta > 0,
                   shared=cfg.agents.share_policy and n > 1)


@dataclass(frozen=True)
class StepSpecs:
    """How every step samples, grows its turn tree and shows feedback between turns, from the
    config: built once (by the training loop, whose evaluation follows the same turns and feedback)
    and handed to the algorithm, which may narrow them (AT-GRPO's best branch, the log-probs IPPO
    asks the decoding pass to record)."""

    sampling: Sampling
    turns: TurnSpec
    feedback: Feedback

    @classmethod
    def of(cls, cfg: RunConfig, task: Task) -> StepSpecs:
        return cls(Sampling.from_algo(cfg.algo), TurnSpec.from_algo(cfg.algo), build_feedback(cfg.feedback, task))


@dataclass(frozen=True)
class StepInput:
    """What the training loop hands an algorithm for one step: the one call between them."""

    items: list[dict]                     # this rank's block of the batch, as each agent sees them
    # role index -> a frozen partner's agent that plays that role in this step's rollouts
    # (magrpo.team.partners); a role a partner fills is not updated (its policy's other roles are)
    seat: dict[int, Agent] = field(default_factory=dict)
    # more items for this step (dynamic sampling): refill(round, n) -> at most n items; None: the
    # same items are sampled again
    refill: Callable[[int, int], list[dict]] | None = None
    # the population's diversity term (magrpo.algos.diversity): the earlier members, or None
    diversity: Diversity | None = None


class Algorithm(Protocol):
    name: ClassVar[str]
    config_schema: ClassVar[type[AlgoConfig]]

    @classmethod
    def team(cls, cfg: RunConfig) -> TeamSpec: ...

    def __init__(self, cfg: RunConfig, agents: list[Agent], task: Task, specs: StepSpecs | None = None) -> None: ...

    def step(self, inp: StepInput) -> dict[str, float]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...
