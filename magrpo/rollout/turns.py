"""Multi-turn episodes: the turn tree that training walks, its returns, and the path evaluation follows.

The tree of one batch (paper, Sec. 4; `algo.num_turns` = T):
  * turn 1 is a team rollout: per item, every agent samples G answers and joint actions pair them
    (aligned: G per item; cross: G^N). Each joint action is a node; the nodes of one item form a
    sibling set, the group of the group-relative advantage.
  * a node is expanded into turn t + 1 by appending, to each agent's conversation, its own answer
    and the feedback it is shown on the joint answer (magrpo.rollout.feedback); every agent then samples
    G answers again, and their joint actions are the node's children: a new sibling set.
  * every expanded node of turn t, across all items of the batch, is generated in ONE call per
    agent: turn t + 1 is one Rollout with a group per expanded node (`Rollout.parents`).
  * a sibling set whose mean immediate reward reaches `early_termination_threshold` is not expanded
    (early termination); `max_branches` expands at most that many nodes per sibling set, picked at
    random from the run's seeded RNG. Nodes not expanded are leaves.

Returns, bottom-up (`discount` = gamma):
    R(node) = r(node) + gamma * mean over its children c of R(c);   R(leaf) = r(leaf).
A node left unexpanded by `max_branches` among expanded siblings would compare its bare reward
against their reward-plus-future; it is given the mean continuation of its expanded siblings
instead, so the group compares like with like. A pruned sibling set has no expanded node and its
returns stay its rewards.

Evaluation follows ONE path per sample through the turns: each of an item's S first-turn joint
answers is continued with G = 1 at every later turn, with the same feedback as training; a path
stops once its own reward reaches the threshold, and its last answer is carried to later turns.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import torch

from magrpo.config.groups import TurnKeys
from magrpo.models.agents import Agent, transcript
from magrpo.rollout.feedback import Feedback, NodeView
from magrpo.rollout.record import (
    Generation,
    Rollout,
    Sampling,
    chain_branching,
    chain_generations,
    chain_joint,
    generate,
    joint_indices,
    team_budget,
    team_rollout,
)
from magrpo.tasks import Scores, Task


@dataclass
class TurnSpec:
    num_turns: int = TurnKeys.num_turns
    joint_mode: str = TurnKeys.joint_mode
    discount: float = TurnKeys.discount
    threshold: float | None = TurnKeys.early_termination_threshold   # early termination
    max_branches: int | None = TurnKeys.max_branches      # nodes expanded per sibling set
    topology: str = TurnKeys.topology    # or "sequential": agent i sees agents 1..i-1's answers (a chain)
    branching: list[int] | None = TurnKeys.branching   # sequential: samples per prefix at each agent (None = G each)
    # "best": expand only each sibling set's best node (AT-GRPO sets it from its algo.branch)
    branch: str = "all"

    @classmethod
    def from_algo(cls, algo: TurnKeys) -> TurnSpec:
        branching = algo.branching
        return cls(num_turns=algo.num_turns, joint_mode=algo.joint_mode, discount=algo.discount,
                   threshold=algo.early_termination_threshold, max_branches=algo.max_branches,
                   topology=algo.topology, branching=list(branching) if branching else None)


@dataclass
class TreeStats:
    """What growing a tree cost and did (timings in seconds, counts over the batch)."""

    generate_s: float = 0.0
    reward_s: float = 0.0
    feedback_s: float = 0.0
    truncated: int = 0                   # prompts cut to max_prompt_length
    degraded: int = 0                    # feedback items that fell back to plain (expert)
    expanded: dict[int, int] = field(default_factory=dict)     # turn -> nodes expanded into turn + 1
    terminated: dict[int, int] = field(default_factory=dict)   # turn -> sibling sets stopped early


def _set_shape(num_agents: int, num_generations: int, joint_mode: str, topology: str,
               branching: list[int] | None) -> tuple[int, int]:
    """(joint actions, generated sequences) of one sibling set: simultaneous, N agents sample G
    each and J = G (aligned) or G^N (cross); sequential, agent i samples G_i per prefix, so
    G_1...G_i in all, and J = G_1...G_N."""
    if topology == "sequential" and num_agents > 1:
        levels = chain_branching(num_agents, num_generations, branching)
        return math.prod(levels), sum(math.prod(levels[:i + 1]) for i in range(num_agents))
    J = num_generations ** num_agents if joint_mode == "cross" else num_generations
    return J, num_agents * num_generations


def tree_size(num_agents: int, num_generations: int, joint_mode: str, num_turns: int,
              max_branches: int | None = None, topology: str = "simultaneous",
              branching: list[int] | None = None) -> int:
    """Nodes (joint actions) of one item's full tree: J per sibling set, one set at turn 1, and each
    set expands min(max_branches, J) nodes into a new set."""
    J, _ = _set_shape(num_agents, num_generations, joint_mode, topology, branching)
    per_set = J if max_branches is None else min(max_branches, J)
    return sum(J * per_set ** t for t in range(num_turns))


def sequences_per_item(num_agents: int, num_generations: int, joint_mode: str, num_turns: int,
                       max_branches: int | None = None, topology: str = "simultaneous",
                       branching: list[int] | None = None) -> int:
    """Sequences one item's full tree generates: each sibling set's (N * G simultaneous,
    G_1 + G_1 G_2 + ... + G_1...G_N sequential) times the 1 + E + ... + E^(T-1) sets (E nodes
    expanded per set)."""
    J, per_set_sequences = _set_shape(num_agents, num_generations, joint_mode, topology, branching)
    per_set = J if max_branches is None else min(max_branches, J)
    return per_set_sequences * sum(per_set ** t for t in range(num_turns))


# --- growing the tree -----------------------------------------------------------------------------


def node_views(rollout: Rollout, nodes: list[int]) -> list[NodeView]:
    """The scored joint actions `nodes` (item-major indices) of a rollout, as feedback reads them."""
    scores = rollout.scores
    assert scores is not None, "score the rollout first"
    items, prompts, answers = rollout.joint_items, rollout.prompts, rollout.completions
    return [NodeView(item=items[k], prompts=prompts[k], answers=answers[k], reward=scores[k],
                     components={c: v[k] for c, v in scores.components.items()},
                     extras={c: v[k] for c, v in scores.extras.items()}, turn=rollout.turn)
            for k in nodes]


def expand(agents: list[Agent], task: Task, feedback: Feedback, parent: Rollout, nodes: list[int],
           sampling: Sampling, joint_mode: str, stats: TreeStats | None = None, topology: str = "simultaneous",
           branching: list[int] | None = None) -> Rollout:
    """The next turn of `nodes` of a scored rollout: one group of joint actions per node, all
    generated in one call per agent (per level of the chain for a sequential team)."""
    stats = stats if stats is not None else TreeStats()
    t0 = time.perf_counter()
    views = node_views(parent, nodes)
    before = feedback.degraded
    messages = feedback(views)                                                       # [node][agent]
    stats.degraded += feedback.degraded - before
    stats.feedback_s += time.perf_counter() - t0
    team = agents[:len(parent.samples)]
    sampling = team_budget(sampling, task, len(team))
    # Agent i's conversation in each node: what it was shown, its answer, and the feedback.
    conversations = [[parent.conversation(i, k) + [{"role": "assistant", "content": v.answers[i]},
                                                   {"role": "user", "content": m[i]}] for i in range(len(team))]
                     for k, v, m in zip(nodes, views, messages)]                      # [node][agent]
    # Each group keeps its item, plus the joint answers of the turns before it (a reward that
    # depends on the discussion so far, like MAPoRL's incentives, reads `turn_history`).
    items = [{**v.item, "turn_history": [*v.item.get("turn_history", []), list(v.answers)]} for v in views]
    if topology == "sequential" and len(team) > 1:      # the turn repeats the chain
        levels = chain_branching(len(team), sampling.num_generations, branching)
        gens, joint = chain_generations(team, task, items, conversations, sampling, levels), chain_joint(levels)
    else:
        gens = [generate(agent, [transcript(c[i]) for c in conversations], sampling, [c[i] for c in conversations])
                for i, agent in enumerate(team)]
        joint = joint_indices(len(team), sampling.num_generations, joint_mode)
    stats.generate_s += sum(g.seconds for g in gens)
    stats.truncated += sum(g.truncated for g in gens)
    return Rollout(items, gens, joint, turn=parent.turn + 1, parents=torch.tensor(nodes, dtype=torch.long))


def choose_expansions(rollout: Rollout, spec: TurnSpec, stats: TreeStats) -> list[int]:
    """Nodes of a scored turn to expand: not in an early-terminated sibling set, at most
    `max_branches` per set (random, from torch's seeded RNG), or with `branch="best"` only each
    set's highest-reward node (the first of equals)."""
    R = rollout.rewards                                                           # [B, J]
    keep = torch.ones_like(R, dtype=torch.bool)
    if spec.threshold is not None:
        stop = R.mean(-1) >= spec.threshold
        keep[stop] = False
        stats.terminated[rollout.turn] = int(stop.sum())
    J = R.shape[1]
    if spec.branch == "best":
        keep &= torch.zeros_like(keep).scatter_(1, R.argmax(-1, keepdim=True), True)
    elif spec.max_branches is not None and spec.max_branches < J:
        order = torch.rand(R.shape).argsort(-1)                                  # a random order per set
        capped = torch.zeros_like(keep).scatter_(1, order[:, :spec.max_branches], True)
        keep &= capped
    nodes = keep.flatten().nonzero().flatten().tolist()
    stats.expanded[rollout.turn] = len(nodes)
    return nodes


def score(rollout: Rollout, task: Task, stats: TreeStats) -> None:
    t0 = time.perf_counter()
    rollout.score(task)
    stats.reward_s += time.perf_counter() - t0


def grow_tree(agents: list[Agent], task: Task, feedback: Feedback, items: list[dict], sampling: Sampling,
              spec: TurnSpec) -> tuple[Rollout, TreeStats]:
    """The scored turn tree of a batch (its root is turn 1; `root.levels()` lists the turns)."""
    stats = TreeStats()
    root = team_rollout(agents, task, items, sampling, spec.joint_mode, spec.topology, spec.branching)
    stats.generate_s += root.seconds
    stats.truncated += sum(g.truncated for g in root.samples)
    score(root, task, stats)
    level = root
    for _ in range(1, spec.num_turns):
        nodes = choose_expansions(level, spec, stats)
        if not nodes:
            break
        child = expand(agents, task, feedback, level, nodes, sampling, spec.joint_mode, stats, spec.topology,
                       spec.branching)
        score(child, task, stats)
        level.children = [child]
        level = child
    return root, stats


# --- returns --------------------------------------------------------------------------------------


def tree_returns(root: Rollout, gamma: float, rewards: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """Per turn, [B_t, J] returns of every node (see the module docstring). `rewards` replaces the
    joint rewards per turn (e.g. one agent's individual share)."""
    levels = root.levels()
    R = [r.clone() for r in rewards] if rewards is not None else [lv.rewards for lv in levels]
    for t in range(len(levels) - 2, -1, -1):
        child = levels[t + 1]
        B, J = R[t].shape
        future = torch.zeros(B * J)
        has = torch.zeros(B * J, dtype=torch.bool)
        future[child.parents] = R[t + 1].mean(-1)          # mean return of each node's children
        has[child.parents] = True
        future, has = future.view(B, J), has.view(B, J)
        # Siblings left unexpanded (max_branches) take their expanded siblings' mean continuation.
        fill = (future * has).sum(-1, keepdim=True) / has.sum(-1, keepdim=True).clamp(min=1)
        R[t] = R[t] + gamma * torch.where(has, future, fill)
    return R


def one_per_prompt(g: Generation) -> Generation:
    """The same rows with G = 1: each prompt repeated once per completion row."""
    G = g.num_generations
    if G == 1:
        return g

    def rep(xs):
        return None if xs is None else [x for x in xs for _ in range(G)]

    return replace(g, prompt_ids=g.prompt_ids.repeat_interleave(G, dim=0),
                   prompt_mask=g.prompt_mask.repeat_interleave(G, dim=0), num_generations=1,
                   prompts=rep(g.prompts), conversations=rep(g.conversations))


def concat_generations(gens: list[Generation], pad_id: int) -> Generation:
    """One Generation holding the rows of several (turns of one agent): prompts left-padded and
    completions right-padded to the longest; row r still answers prompt r // num_generations."""
    if len(gens) == 1:
        return gens[0]
    if len({g.num_generations for g in gens}) > 1:      # e.g. one policy's roles at different chain levels
        gens = [one_per_prompt(g) for g in gens]
    G = gens[0].num_generations
    P = max(g.prompt_ids.shape[1] for g in gens)
    C = max(g.completion_ids.shape[1] for g in gens)

    def left(x: torch.Tensor, width: int, value) -> torch.Tensor:
        return torch.nn.functional.pad(x, (width - x.shape[1], 0), value=value)

    def right(x: torch.Tensor, width: int, value) -> torch.Tensor:
        return torch.nn.functional.pad(x, (0, width - x.shape[1]), value=value)

    def recorded(name: str):
        """A decoding-time record of every part (right-padded), or None when a part lacks it."""
        parts = [getattr(g, name) for g in gens]
        if any(x is None for x in parts) or len({g.logprobs_temperature for g in gens}) > 1:
            return None
        return torch.cat([torch.nn.functional.pad(x, (0, 0) * (x.dim() - 2) + (0, C - x.shape[1])) for x in parts])

    convs = None
    if any(g.conversations for g in gens):
        convs = [c for g in gens for c in (g.conversations or [[{"role": "user", "content": p}] for p in g.prompts])]
    return Generation(
        prompt_ids=torch.cat([left(g.prompt_ids, P, pad_id) for g in gens]),
        prompt_mask=torch.cat([left(g.prompt_mask, P, 0) for g in gens]),
        completion_ids=torch.cat([right(g.completion_ids, C, pad_id) for g in gens]),
        completion_mask=torch.cat([right(g.completion_mask, C, 0.0) for g in gens]),
        texts=[t for g in gens for t in g.texts], num_generations=G, seconds=sum(g.seconds for g in gens),
        prompts=[p for g in gens for p in g.prompts], conversations=convs,
        truncated=sum(g.truncated for g in gens), logprobs=recorded("logprobs"),
        logprobs_temperature=gens[0].logprobs_temperature, hidden=recorded("hidden"))


def select_prompts(g: Generation, rows: torch.Tensor) -> Generation:
    """The rows of `g` where `rows` (a [n*G] bool mask) is set; it keeps or drops every row of a
    prompt together (a group), so row r still answers prompt r // num_generations."""
    G = g.num_generations
    by_prompt = rows.view(-1, G)
    if not bool((by_prompt == by_prompt[:, :1]).all()):
        raise ValueError("select_prompts keeps whole groups: the mask differs within a prompt's rows")
    prompts = by_prompt[:, 0]
    pick = prompts.nonzero().flatten().tolist()
    return replace(g, prompt_ids=g.prompt_ids[prompts], prompt_mask=g.prompt_mask[prompts],
                   completion_ids=g.completion_ids[rows], completion_mask=g.completion_mask[rows],
                   texts=[t for t, k in zip(g.texts, rows.tolist()) if k],
                   prompts=[g.prompts[p] for p in pick] if g.prompts else [],
                   conversations=[g.conversations[p] for p in pick] if g.conversations else None,
                   logprobs=None if g.logprobs is None else g.logprobs[rows],
                   values=None if g.values is None else g.values[rows],
                   hidden=None if g.hidden is None else g.hidden[rows])


# --- metrics --------------------------------------------------------------------------------------


def take(scores: Scores, rows: list[int]) -> Scores:
    """The rows `rows` of a Scores, components and extras included."""
    return Scores([scores[r] for r in rows], {k: [v[r] for r in rows] for k, v in scores.components.items()},
                  {k: [v[r] for r in rows] for k, v in scores.extras.items()})


def tree_metrics(root: Rollout, stats: TreeStats, prefix: str = "train") -> dict[str, float]:
    """Per-turn reward means and components, tree sizes, pruning, truncation and feedback counts."""
    m: dict[str, float] = {}
    for level in root.levels():
        t, s = level.turn, level.scored
        m[f"{prefix}/turn_{t}/reward_mean"] = sum(s) / max(len(s), 1)
        for name, values in s.components.items():
            m[f"{prefix}/turn_{t}/reward/{name}"] = sum(values) / max(len(values), 1)
        m[f"{prefix}/turn_{t}/nodes"] = float(len(s))
        m[f"{prefix}/turn_{t}/prompt_tokens_mean"] = (sum(g.prompt_mask.sum().item() for g in level.samples)
                                                     / max(sum(len(g.prompt_mask) for g in level.samples), 1))
    for t, n in stats.expanded.items():
        m[f"{prefix}/turn_{t}/expanded"] = float(n)
    for t, n in stats.terminated.items():
        m[f"{prefix}/turn_{t}/terminated_sets"] = float(n)
    m[f"{prefix}/prompt_truncated"] = float(stats.truncated)
    m[f"{prefix}/feedback/degraded"] = float(stats.degraded)
    return m


# --- evaluation: one path per sample --------------------------------------------------------------


@dataclass
class Path:
    """Turn-by-turn views of S paths per item: per turn, (rollout, node) of every path's answer."""

    levels: list[Rollout]
    at: list[list[tuple[int, int]]]      # [turn][path] -> (level index, node index)


def follow_paths(agents: list[Agent], task: Task, feedback: Feedback | None, first: Rollout, sampling: Sampling,
                 spec: TurnSpec) -> tuple[Path, TreeStats]:
    """Continue each joint answer of a (scored or not) first turn with G = 1 for the later turns
    (`feedback`: what is shown between them; None only for one turn)."""
    stats = TreeStats()
    if first.scores is None:
        score(first, task, stats)
    one = replace(sampling, num_generations=1)
    levels = [first]
    n_paths = first.num_items * first.num_joint
    at = [[(0, p) for p in range(n_paths)]]
    for _ in range(1, spec.num_turns):
        level, current = levels[-1], at[-1]
        li = len(levels) - 1
        live = [(p, node) for p, (lv, node) in enumerate(current) if lv == li
                and (spec.threshold is None or level.scored[node] < spec.threshold)]
        if not live:
            at.append(list(current))
            continue
        if feedback is None:
            raise ValueError(f"follow_paths: turns.num_turns={spec.num_turns} needs the feedback shown between "
                             f"the turns (a Feedback, magrpo.rollout.feedback.build_feedback); got None")
        # one answer per agent per path (a sequential team's chain has branching 1, ..., 1)
        child = expand(agents, task, feedback, level, [node for _, node in live], one, "aligned", stats,
                       spec.topology, [1] * len(level.samples))
        score(child, task, stats)
        level.children = [child]
        levels.append(child)
        nxt = list(current)
        for g, (p, _) in enumerate(live):          # G = 1 and aligned: group g's only node is node g
            nxt[p] = (li + 1, g)
        at.append(nxt)
    return Path(levels, at), stats


Answers = tuple[list[dict], list[list[str]], list[list[str]], Scores]   # items, prompts, completions, scores


@dataclass
class EvalAnswers:
    """What one evaluation produced: per turn, every sample's answer after that turn (items,
    prompts, completions, scores; gathered from every rank, in item order), the paths themselves
    (this rank's, for diagnostics that re-run part of a path), and what the answers cost."""

    per_turn: list[Answers]
    paths: list[Path]
    tokens: list[float]
    gen_s: float
    reward_s: float
    degraded: int
    num_items: int

    @property
    def final(self) -> Answers:
        return self.per_turn[-1]


def path_turn(path: Path, turn: int) -> tuple[list[dict], list[list[str]], list[list[str]], Scores]:
    """(items, prompts, completions, scores) of every path's answer after `turn` (1-based)."""
    rows = path.at[turn - 1]
    cache = {li: (lv.joint_items, lv.prompts, lv.completions) for li, lv in enumerate(path.levels)}
    items = [cache[li][0][k] for li, k in rows]
    prompts = [cache[li][1][k] for li, k in rows]
    completions = [cache[li][2][k] for li, k in rows]
    parts = [take(path.levels[li].scored, [k]) for li, k in rows]
    return items, prompts, completions, Scores.concat(parts) if parts else Scores([])


def path_cost(path: Path, first_cost: tuple[float, torch.Tensor]) -> tuple[float, list[float]]:
    """Generation seconds of every turn, and each path's output tokens summed over its turns."""
    seconds, first_tokens = first_cost
    tokens = first_tokens.tolist()
    seconds += sum(lv.seconds for lv in path.levels[1:])
    owner: dict[tuple[int, int], int] = {}      # each node of a later turn belongs to the one path that reached it
    for rows in path.at[1:]:
        for p, (li, k) in enumerate(rows):
            if li > 0:
                owner[(li, k)] = p
    for li, lv in enumerate(path.levels[1:], start=1):
        for k, n in enumerate(lv.output_tokens.tolist()):
            tokens[owner[(li, k)]] += n
    return seconds, tokens
