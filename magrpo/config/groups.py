"""The bases of the config groups a run chooses: every algorithm's `algo` node composes AlgoConfig
(how answers are sampled, the turn tree, a batch's size), every task's `task` node is a TaskConfig,
every task's `reward` node a RewardConfig, and every feedback mode's `feedback` node a
FeedbackConfig. A chosen option's schema subclasses its base with its own keys (an algorithm's in
magrpo/algos/, a task's in magrpo/tasks/, a feedback mode's in magrpo/rollout/feedback/), so a run's
typed config (magrpo.config.schemas.RunConfig) says what every group holds, whatever was chosen.
"""

from __future__ import annotations

from dataclasses import dataclass

from magrpo.core.registry import names_of
from magrpo.core.schema import at_least, option, positive, within


@dataclass
class SamplingKeys:
    """The `algo.*` keys of how each agent samples its answers. AlgoConfig composes them, and
    Sampling takes its defaults from them."""

    temperature: float = positive(1.0,
                                  help="sampling temperature of every agent "
                                       "(agents.models.K.sampling overrides)")
    top_p: float = within(0, 1, 1.0, lo_open=True, help="nucleus-sampling mass; 1 = off")
    top_k: int = at_least(0, 0, " (0 = off)", help="sample from the k most likely tokens")
    max_new_tokens: int = at_least(1, 24, help="cap on tokens per answer per turn")
    max_prompt_length: int = at_least(1, 1024,
                                      help="longer prompts (multi-turn histories) lose their beginning")
    share_prompt: bool = option(True,
                                help="Run each prompt once for its G samples, in generation "
                                     "and in the update (exact; a model that cannot continue "
                                     "a shared key/value cache falls back with one log line).")
    decode_step: str = option("lean", choices=["lean", "static", "graph"],
                              help="The one-token decoding step of a Llama-family model "
                                   "(magrpo.models.sampler): lean (default), static "
                                   "(fixed shapes), graph (the static step replayed as "
                                   "a CUDA graph on a GPU; the static step on a CPU)")


@dataclass
class TurnKeys:
    """The `algo.*` keys of the turn tree: T turns with feedback between them (the `feedback`
    group), how each turn's joint actions are formed and how far the tree grows. AlgoConfig
    composes them, and TurnSpec takes its defaults from them."""

    joint_mode: str = option("aligned", choices=["aligned", "cross"],
                             help="aligned: sample k of each agent forms "
                                  "joint k; cross: every combination (G^N)")
    num_turns: int = at_least(1, 1, help="T turns, with feedback between them (the `feedback` group)")
    discount: float = within(0, 1, 1.0, help="gamma in R = r + gamma * mean(children's R)")
    early_termination_threshold: float | None = option(None,
                                                       help="a sibling set whose mean "
                                                            "reward reaches it stops")
    max_branches: int | None = option(None, check=lambda v: v >= 1,
                                      allowed=">= 1, or null = expand every node",
                                      help="nodes expanded per sibling set, picked at random")
    max_tree_nodes: int = at_least(1, 2048, help="nodes of one item's tree; a bigger config stops at start")
    topology: str = option("simultaneous", choices=["simultaneous", "sequential"],
                           help="simultaneous: every agent answers at once; sequential: "
                                "agent i sees the answers of 1..i-1 (a chain)")
    branching: list[int] | None = option(None,
                                         help="sequential: samples per prefix of each agent (null = G each)")


@dataclass
class AlgoConfig(SamplingKeys, TurnKeys):
    """`algo.*` keys that every algorithm reads: how answers are sampled (SamplingKeys), the turn
    tree (TurnKeys), and how big a batch is."""

    name: str = option("magrpo", choices=lambda: names_of("algo.name"))
    num_generations: int = at_least(2, 4, " (a group needs at least two samples)",
                                    help="G per agent per item")
    batch_size: int = at_least(1, 8, help="items per update")
    micro_batch_size: int = at_least(1, 64, help="sequences per forward/backward (gradients accumulate)")
    beta: float = at_least(0, 0.0, help="KL to the frozen reference (0 = none, no reference loaded)")
    signal_bonus: float = at_least(0, 0.0,
                                   help="positive signalling (magrpo/algos/signalling.py): each "
                                        "sample's return gains lam * pmi(move; prompt) in bits")
    signal_agents: list[int] | None = option(None,
                                             help="the agents (numbered from 1) "
                                                  "that get it; null = every agent")
    other_play: bool = option(False,
                              help="Other-Play (magrpo/tasks/symmetry.py): agents 2..N train on the game "
                                   "relabelled by a random symmetry of the task per item and step (a "
                                   "task that declares none is refused); evaluation plays it as it is")


@dataclass
class TaskConfig:
    """`task.*` keys every task has: its registered name. A task's schema adds its data and sizes."""

    name: str = option("length_ratio", choices=lambda: names_of("task.name"),
                       help="the task (a registered name)")


@dataclass
class RewardConfig:
    """The keys every task's `reward` node accepts: each task's reward schema inherits them (a
    schema that does not is given them by `reward_schema_of`). Reward functions that replace the
    task's own reward, for any task and algorithm (magrpo.tasks.reward_fns; docs/tasks.md, "Reward functions")."""

    fn: str | None = option(None, help="a registered reward function, or module:function")
    fns: list[str] | None = option(None, help="several of them, summed: total = sum_i weights[i] * f_i")
    weights: list[float] | None = option(None, help="one per function; null = 1.0 each")
    max: float | None = option(None, check=lambda v: v is None or v > 0, allowed="> 0, or null",
                               help="The largest raw value of the functions' total (before shift and "
                                    "scale): normalized_return = raw / max. Null: no normalized_return "
                                    "(a task's own maximum holds for its own reward only).")
    completions: str = option("parts", choices=["parts", "text"],
                              help="What the functions get per joint answer: parts = `completions[k]` "
                                   "the list of the agents' texts and `prompts[k]` of their prompts "
                                   "(plain strings for a one-agent team, as in TRL); text = each joint "
                                   "answer as ONE string, `Task.assemble(item, parts)`, and its prompts "
                                   "as one (the agents' prompts in agent order, joined by a blank line): "
                                   "what a TRL function written for strings (`len(completion)`) expects.")
    # total = raw * scale + shift: raw is the task's own reward, or the functions' total
    shift: float = option(0.0, help="added to every total alike")
    scale: float = positive(1.0,
                            help="multiplies raw; positive, so answers keep their order (tables undo it)")


@dataclass
class FeedbackConfig:
    """`feedback.*` keys every mode reads; a mode's schema adds its own."""

    mode: str = option("none", choices=lambda: names_of("feedback.mode"),
                       help="what each agent is shown between turns (a registered feedback mode)")
