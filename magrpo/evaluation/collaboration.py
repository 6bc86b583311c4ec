"""Collaboration diagnostics: did the agents of a team work together, or did one do the work?

Computed by an evaluation (`eval.diagnostics=true`; magrpo.evaluation.loop.evaluate) from the answers it
has already produced and scored. Let a = (a_1, ..., a_N) be one joint answer after the last turn,
x its item, and R(x, a) the reward `task.score` gives it (the training reward, shift and scale
included). Every mean below runs over the evaluation's joint answers (items x samples):

  agent_<k>/contribution   mean of  d_k = R(x, a) - R(x, a with a_k replaced by a neutral answer),
                           the drop in team reward without agent k's work. The neutral answer
                           (`eval.ablation`) is "" (`empty`), or (`base`) the untrained base model's
                           answer to the prompt agent k saw: a LoRA agent with its adapter switched
                           off, the frozen reference of a full fine-tune, else a fresh copy of
                           `agents.models[k].name_or_path` loaded for it (what `load_base` gives).
  lazy_agent_rate          the fraction of joint answers in which SOME agent's own drop is ~0,
                           |d_k| <= `eval.lazy_threshold`: an absolute tolerance in reward units
                           (after reward.shift/scale; default 1e-6, float noise). A lazy agent's
                           answer did not move the reward at all in that joint answer.
  answer_similarity        mean over joint answers of the mean ROUGE-L F over the agent pairs i < j,
                           F(a_i, a_j); 1 means the agents wrote the same text (role collapse).
                           Teams of two or more agents only.
  agent_<k>/influence      how much agent k's answer changes the answers that follow it: those of
                           the later agents k+1..N of a chain (`algo.topology=sequential`, or the
                           `sequential` scheme), and with `algo.num_turns` = T > 1 every agent's
                           answers of turns 2..T (with the evaluation's feedback). Agent k's first-turn
                           answer a_k is resampled (a fresh sample a'_k of the same agent from the
                           same prompt); the followers are generated twice FROM ONE SEED, once after
                           a_k and once after a'_k (common random numbers: agent k's answer is then
                           all that differs, so followers that ignore it come out identical). The
                           influence is the mean over joint answers of the mean over the followers f
                           of 1 - ROUGE-L F(f after a_k, f after a'_k). A later turn is a follower
                           only where both continuations generated it (a path that reached
                           early_termination_threshold stops). The last agent of a one-turn chain
                           has no followers, nor has any agent of a one-turn simultaneous team: no
                           influence is reported for them (nor for the `discussion` scheme, whose two
                           rounds are not a path).

Identical texts count as ROUGE-L F = 1 (also two empty answers, which rouge_score scores 0), so
the same answer twice is similarity 1 and influence 0.

What it costs, besides the evaluation (also reported: `diagnostics_time_s`,
`diagnostics/reward_calls` = joint answers re-scored, `diagnostics/score_calls` = batched
`task.score` calls, `diagnostics/generations` = sequences generated):
  contribution (empty)   N reward evaluations per joint answer, in N batched score calls;
  contribution (base)    the same plus N generated answers per joint answer (and, where no adapter
                         or reference gives the base model, one more copy of each model in memory);
  influence              per agent with followers and joint answer: 1 resampled answer, plus twice
                         the followers (2 (N - k) in a chain, and 2 N (T - 1) over T turns), whose
                         later turns are scored as the evaluation scores them;
  similarity             N (N - 1) / 2 ROUGE-L computations per joint answer (CPU only).

Everything runs under a forked RNG seeded from the evaluation's seed, so the same seed gives the
same numbers and training's random stream is untouched. Under torchrun each rank diagnoses its
own block of the answers and the per-answer values are gathered before the means are taken.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch

from magrpo.config.schemas import EvalSchema
from magrpo.models import distributed
from magrpo.models.agents import Agent, transcript
from magrpo.rollout.record import Generation, Rollout, Sampling, chain_generations, generate, team_budget
from magrpo.rollout.turns import EvalAnswers, Path, TurnSpec, follow_paths, one_per_prompt, path_turn
from magrpo.tasks import Scores, Task
from magrpo.tasks.metrics import rouge_l_scores

if TYPE_CHECKING:
    from magrpo.rollout.feedback import Feedback

SEED_OFFSET = 4_099     # the diagnostics' RNG stream, apart from the evaluation's own


@dataclass
class CollaborationConfig:
    """What `evaluate(..., diagnostics=...)` adds (module docstring). `load_base` returns the
    untrained models, one per agent, for agents whose base model is not at hand (no adapter and no
    reference); it is called at most once, by `ablation="base"`, and should cache."""

    ablation: str = "empty"
    lazy_threshold: float = 1e-6
    load_base: Callable[[], list[Agent]] | None = None

    @classmethod
    def from_eval(cls, eval_cfg: EvalSchema,
                  load_base: Callable[[], list[Agent]] | None = None) -> CollaborationConfig | None:
        """From a config's `eval` node: None unless `eval.diagnostics` is true."""
        if not eval_cfg.diagnostics:
            return None
        return cls(eval_cfg.ablation, eval_cfg.lazy_threshold, load_base)


@dataclass
class Costs:
    reward_calls: int = 0       # joint answers scored
    score_calls: int = 0        # task.score invocations
    generations: int = 0        # sequences generated

    def score(self, task: Task, items: list[dict], prompts: list[list[str]], completions: list[list[str]]) -> Scores:
        self.score_calls += 1
        self.reward_calls += len(completions)
        return task.score(items, prompts, completions)


def collaboration_metrics(agents: list[Agent], task: Task, answers: EvalAnswers, sampling: Sampling, seed: int,
                          config: CollaborationConfig, scheme: str = "team", turns: TurnSpec | None = None,
                          feedback: Feedback | None = None) -> dict[str, float]:
    """The diagnostics of one evaluation's answers (module docstring), unprefixed."""
    turns = turns or TurnSpec()
    started, costs = time.perf_counter(), Costs()
    world = distributed.world()
    # This rank's own answers after the last turn, in its paths' order.
    final = [path_turn(p, turns.num_turns) for p in answers.paths]
    items = [it for f in final for it in f[0]]
    prompts = [x for f in final for x in f[1]]
    completions = [c for f in final for c in f[2]]
    rewards = [r for f in final for r in f[3]]
    with torch.random.fork_rng(devices=_cuda(agents)):
        torch.manual_seed(seed + SEED_OFFSET + 1_000_003 * world.rank)
        neutral = neutral_answers(agents, task, answers.paths, sampling, turns.num_turns, config, costs)
        drops = contributions(task, items, prompts, completions, rewards, neutral, costs)       # [P][N]
        chain = scheme == "sequential" or (scheme == "team" and turns.topology == "sequential")
        infl = influences(agents, task, answers.paths, sampling, turns, feedback, chain, costs) \
            if scheme != "discussion" else {}
    similarity = [answer_similarity(c) for c in completions]
    if world.distributed:       # every rank's per-answer values, then the means over the whole split
        parts = distributed.gather_objects((drops, similarity, infl, (costs.reward_calls, costs.score_calls,
                                                                       costs.generations)))
        drops = [d for p in parts for d in p[0]]
        similarity = [s for p in parts for s in p[1]]
        infl = {k: [v for p in parts for v in p[2].get(k, [])] for k in infl}
        costs = Costs(*(sum(p[3][i] for p in parts) for i in range(3)))
    return summarize(drops, similarity, infl, config.lazy_threshold) | {
        "diagnostics_time_s": time.perf_counter() - started,
        "diagnostics/reward_calls": float(costs.reward_calls),
        "diagnostics/score_calls": float(costs.score_calls),
        "diagnostics/generations": float(costs.generations)}


def summarize(drops: list[list[float]], similarity: list[float | None], influence: dict[int, list[float]],
              lazy_threshold: float) -> dict[str, float]:
    """The means of the per-answer values: drops[p][k] of agent k in joint answer p,
    similarity[p] (None for one agent), influence[k] = agent k's value per joint answer."""
    out: dict[str, float] = {}
    num_agents = max((len(d) for d in drops), default=0)
    for k in range(num_agents):
        out[f"agent_{k + 1}/contribution"] = _mean([d[k] for d in drops])
    if drops:
        lazy = [any(abs(d_k) <= lazy_threshold for d_k in d) for d in drops]
        out["lazy_agent_rate"] = _mean([float(x) for x in lazy])
    pairs = [s for s in similarity if s is not None]
    if pairs:
        out["answer_similarity"] = _mean(pairs)
    for k, values in sorted(influence.items()):
        if values:
            out[f"agent_{k + 1}/influence"] = _mean(values)
    return out


# -- contribution ---------------------------------------------------------------------------------


def contributions(task: Task, items: list[dict], prompts: list[list[str]], completions: list[list[str]],
                  rewards: list[float], neutral: list[list[str]], costs: Costs) -> list[list[float]]:
    """[P][N] drop of each joint answer's reward when agent k's answer is neutral[k][p]: one
    batched score call per agent over every joint answer."""
    num_agents = len(completions[0]) if completions else 0
    per_agent = []
    for k in range(num_agents):
        ablated = [c[:k] + [neutral[k][p]] + c[k + 1:] for p, c in enumerate(completions)]
        scores = costs.score(task, items, prompts, ablated)
        per_agent.append([r - s for r, s in zip(rewards, scores)])
    return [list(d) for d in zip(*per_agent)]


def neutral_answers(agents: list[Agent], task: Task, paths: list[Path], sampling: Sampling, num_turns: int,
                    config: CollaborationConfig, costs: Costs) -> list[list[str]]:
    """[N][P] the answer that stands in for agent k's in each final joint answer: "" (empty), or the
    base model's answer to the same prompt (base), generated one path batch at a time."""
    final = [path.at[num_turns - 1] for path in paths]
    num_paths = sum(len(rows) for rows in final)
    num_agents = len(paths[0].levels[0].samples) if paths else 0
    if config.ablation == "empty":
        return [[""] * num_paths for _ in range(num_agents)]
    one = replace(team_budget(sampling, task, num_agents), num_generations=1)
    out = []
    for k in range(num_agents):
        texts: list[str] = []
        with base_model(agents, k, config.load_base) as base:
            for path, rows in zip(paths, final):
                convs = [path.levels[li].conversation(k, node) for li, node in rows]
                gen = generate(base, [transcript(c) for c in convs], one, convs)
                costs.generations += len(gen.texts)
                texts += gen.texts
        out.append(texts)
    return out


@contextlib.contextmanager
def base_model(agents: list[Agent], k: int, load_base: Callable[[], list[Agent]] | None) -> Iterator[Agent]:
    """Agent k's untrained base model, as an agent to generate with (module docstring)."""
    agent = agents[k]
    if agent.reference is not None or hasattr(agent.model, "disable_adapter"):
        with agent.reference_mode() as model:
            yield replace(agent, model=model, adapter=None)     # adapter None: nothing switches it back on
        return
    if load_base is None:
        raise RuntimeError(f"eval.ablation=base: {agent.name} has neither an adapter nor a reference model, "
                           "and no base models were given to load")
    yield load_base()[k]


# -- similarity -----------------------------------------------------------------------------------


def similarity(a: str, b: str) -> float:
    """ROUGE-L F of two answers; identical texts count 1 (two empty answers too)."""
    return 1.0 if a == b else rouge_l_scores([a], [b])[0]


def answer_similarity(answers: list[str]) -> float | None:
    """Mean ROUGE-L F over the agent pairs of one joint answer; None for a single agent."""
    pairs = list(itertools.combinations(answers, 2))
    return _mean([similarity(a, b) for a, b in pairs]) if pairs else None


# -- influence ------------------------------------------------------------------------------------


def influences(agents: list[Agent], task: Task, paths: list[Path], sampling: Sampling, turns: TurnSpec,
               feedback: Feedback | None, chain: bool, costs: Costs) -> dict[int, list[float]]:
    """Agent k -> its influence on each joint answer it has followers in (module docstring)."""
    multi = turns.num_turns > 1
    num_agents = len(paths[0].levels[0].samples) if paths else 0
    chain = chain and num_agents > 1
    out: dict[int, list[float]] = {}
    for k in range(num_agents):
        if not multi and not (chain and k < num_agents - 1):
            continue        # no answer follows agent k's
        out[k] = []
        for path in paths:
            out[k] += _influence_of(agents, task, path, k, sampling, turns, feedback, chain, costs)
    return out


def _influence_of(agents: list[Agent], task: Task, path: Path, k: int, sampling: Sampling, turns: TurnSpec,
                  feedback: Feedback | None, chain: bool, costs: Costs) -> list[float]:
    """Agent k's influence on each joint answer of one path batch."""
    first = path.levels[0]
    one = replace(team_budget(sampling, task, len(first.samples)), num_generations=1)
    # Row p of every agent's samples is path p's answer (evaluation pairs samples aligned, and its
    # chain branches only at agent 1), so one row per path and G = 1 make each path its own group.
    rows = [one_per_prompt(g) for g in first.samples]
    resampled = generate(agents[k], rows[k].prompts, one, rows[k].conversations)
    costs.generations += len(resampled.texts)
    # Common random numbers: the followers are generated twice from one seed, after agent k's
    # original answer and after the resampled one, so agent k's answer is all that differs between
    # the two; followers that ignore it come out the same (influence 0) rather than differing by
    # their own sampling noise.
    seed = int(torch.randint(0, 2**31 - 1, ()))
    before, after = (_followers(agents, task, first.joint_items, rows, k, answer, sampling, turns, feedback, chain,
                                seed, costs) for answer in (rows[k], resampled))
    out = []
    for old, new in zip(before, after):
        both = [key for key in old if key in new]
        if both:
            out.append(_mean([1.0 - similarity(old[key], new[key]) for key in both]))
    return out


def _followers(agents: list[Agent], task: Task, items: list[dict], rows: list[Generation], k: int, answer: Generation,
               sampling: Sampling, turns: TurnSpec, feedback: Feedback | None, chain: bool, seed: int,
               costs: Costs) -> list[dict[tuple[int, int], str]]:
    """Per path, the answers generated after agent k's `answer` (one row per path), keyed by
    (turn, agent): the rest of the chain, then every agent's answer of each later turn the path
    reaches. Generated from `seed`."""
    N = len(rows)
    one = replace(team_budget(sampling, task, N), num_generations=1)
    with torch.random.fork_rng(devices=_cuda(agents)):
        torch.manual_seed(seed)
        if chain:
            bases = [task.prompts(item, N) for item in items]
            gens = chain_generations(agents[:N], task, items, bases, one, [1] * N, fixed=[*rows[:k], answer])
            costs.generations += sum(len(g.texts) for g in gens[k + 1:])
        else:
            gens = [*rows[:k], answer, *rows[k + 1:]]
        rollout = Rollout(list(items), gens, torch.zeros((1, N), dtype=torch.long))
        out = [{(1, j): c[j] for j in range(k + 1, N)} if chain else {} for c in rollout.completions]
        if turns.num_turns > 1:
            if feedback is None:
                raise ValueError("collaboration diagnostics of a multi-turn evaluation need its feedback "
                                 "(the later turns are generated after it)")
            path, _ = follow_paths(agents, task, feedback, rollout, sampling, turns)
            costs.score_calls += len(path.levels)
            costs.reward_calls += sum(lv.num_items * lv.num_joint for lv in path.levels)   # one per joint answer
            costs.generations += sum(len(g.texts) for lv in path.levels[1:] for g in lv.samples)
            for t in range(2, turns.num_turns + 1):
                texts = path_turn(path, t)[2]
                for p, (level, _) in enumerate(path.at[t - 1]):
                    if level == t - 1:      # the path generated turn t (one stopped early carries its answer)
                        out[p].update({(t, j): a for j, a in enumerate(texts[p])})
    return out


def _cuda(agents: list[Agent]) -> list[torch.device]:
    return [a.device for a in agents if a.device.type == "cuda"]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
