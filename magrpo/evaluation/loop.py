"""The evaluation loop: a team on held-out items, scored by the reward, its components and the
task's metrics. (The `magrpo-eval` command around it is magrpo/cli/evaluate.py.)

Used before training, every `eval.every` steps, at the end, and by `magrpo-eval`. How the
agents produce a joint answer is a named scheme from `magrpo.rollout.record.SCHEMES` (team, single,
naive_concat, sequential, discussion): the same rollout code that training uses.

The evaluation follows one path per sample through the turns (magrpo.rollout.turns.follow_paths) with
the same feedback as training; one turn is the case T = 1 of the same path. `reward_mean`, its
components, `normalized_return` and the task's metrics describe the answers after the last turn,
and `turn_{t}/...` the same metrics of the answers after turn t (a path stopped early keeps its
last answer), so a one-turn and a multi-turn evaluation report the same names.

With `diagnostics=` (`eval.diagnostics=true`), `evaluate` also reports the collaboration
diagnostics of the same answers: each agent's contribution and influence, the lazy-agent rate and
the answers' similarity (magrpo.evaluation.collaboration, which defines them and what they cost).

Sampling runs under a forked RNG seeded from the run's seed, so evaluating never changes the
training stream (a resumed run and an uninterrupted one see the same random numbers).
Under torchrun each rank generates and scores its block of the items, and the metrics are
computed on everything gathered from the ranks.
"""

from __future__ import annotations

import logging

import torch

from magrpo.config.run import RunConfig
from magrpo.evaluation.collaboration import CollaborationConfig, collaboration_metrics
from magrpo.models.agents import Agent
from magrpo.rollout.answers import collect_answers
from magrpo.rollout.feedback import Feedback
from magrpo.rollout.record import Sampling
from magrpo.rollout.turns import Answers, TurnSpec
from magrpo.tasks import Scores, Task

log = logging.getLogger("magrpo")


def eval_sampling(cfg: RunConfig) -> Sampling:
    """How an evaluation samples: `eval.*` (samples, do_sample, temperature) over the run's decoding keys."""
    return Sampling(num_generations=cfg.eval.num_samples, max_new_tokens=cfg.algo.max_new_tokens,
                    do_sample=cfg.eval.do_sample, temperature=cfg.eval.temperature, top_p=cfg.algo.top_p,
                    top_k=cfg.algo.top_k, max_prompt_length=cfg.algo.max_prompt_length,
                    share_prompt=cfg.algo.share_prompt, decode_step=cfg.algo.decode_step)


@torch.no_grad()
def evaluate(agents: list[Agent], task: Task, items: list[dict], sampling: Sampling, batch_size: int,
             seed: int, num_examples: int = 8, scheme: str = "team", turns: TurnSpec | None = None,
             feedback: Feedback | None = None,
             diagnostics: CollaborationConfig | None = None) -> tuple[dict[str, float], list[dict]]:
    """Metrics (unprefixed: reward_mean, reward/<component>, pass@1, normalized_return, and the same
    per turn as turn_{t}/...) and example rows. One path for any number of turns: with one turn
    the path stops after the first rollout. With `diagnostics`, also the collaboration
    diagnostics (agent_<k>/contribution, lazy_agent_rate, ...: magrpo.evaluation.collaboration). No gradients."""
    answers = collect_answers(agents, task, items, sampling, batch_size, seed, scheme, turns, feedback)
    metrics = eval_metrics(task, answers.per_turn, answers.tokens, answers.gen_s, answers.reward_s,
                           answers.degraded, answers.num_items)
    if diagnostics is not None:
        metrics.update(collaboration_metrics(agents, task, answers, sampling, seed, diagnostics, scheme, turns,
                                             feedback))
    return metrics, example_rows(task, answers.final, sampling.num_generations, num_examples)


def example_rows(task: Task, final: Answers, num_samples: int, num_examples: int) -> list[dict]:
    """The first sample of the first `num_examples` items, as logged rows: each agent's prompt and
    completion, the team's joint answer (`Task.assemble`: what `magrpo-score` judges) and its reward."""
    all_items, prompts, completions, scores = final
    rows = list(zip(all_items, prompts, completions, scores))[::max(num_samples, 1)][:num_examples]
    return [{"id": it.get("id"), "prompts": p, "completions": c, "answer": _joint(task, it, c), "reward": r}
            for it, p, c, r in rows]


def _joint(task: Task, item: dict, parts: list[str]) -> str | None:
    try:
        return task.assemble(item, parts)
    except Exception as e:     # a task's own assembly failing on odd parts costs the row its answer only
        log.debug("assemble failed on item %s: %s", item.get("id"), e)
        return None


def eval_metrics(task: Task, per_turn: list[Answers], tokens: list[float], gen_s: float, reward_s: float,
                 degraded: int, num_items: int) -> dict[str, float]:
    """Everything an evaluation reports, from its answers per turn and what they cost."""
    metrics = turn_metrics(task, per_turn)
    metrics.update({"output_tokens_mean": sum(tokens) / max(len(tokens), 1),
                    "response_time_s": gen_s / max(num_items, 1),
                    "reward_time_s": reward_s, "num_items": float(num_items)})
    if len(per_turn) > 1:
        metrics["feedback/degraded"] = float(degraded)
    return metrics


def metric_names(task: Task, item: dict, num_samples: int, num_answers: int, num_turns: int) -> list[str]:
    """The metric names an evaluation of this shape reports, made by the code that makes them
    (`eval_metrics`) on empty answers to one item: a run checks `optimized_metric` against them
    before any work."""
    items = [item] * num_samples
    prompts = [task.prompts(item, num_answers)] * num_samples
    completions = [[""] * num_answers for _ in items]
    answers = (items, prompts, completions, task.score(items, prompts, completions))
    return sorted(eval_metrics(task, [answers] * num_turns, [], 0.0, 0.0, 0, 1))



def turn_metrics(task: Task, per_turn: list[Answers]) -> dict[str, float]:
    """The answer metrics of every turn, as turn_{t}/<name>, and those of the last turn (the team's
    answer) unprefixed. The one place an evaluation's metric names are made: `metric_names`
    predicts them from it."""
    metrics: dict[str, float] = {}
    for t, (items, _, completions, scores) in enumerate(per_turn, start=1):
        turn = answer_metrics(task, items, completions, scores)
        metrics.update({f"turn_{t}/{k}": v for k, v in turn.items() if k != "reward_std"})
    metrics.update(turn)
    return metrics


def answer_metrics(task: Task, items: list[dict], completions: list[list[str]], scores: Scores) -> dict[str, float]:
    """Reward summary, the task's metrics and the normalized return of one set of answers."""
    m = summarize_scores(scores)
    m.update(task.metrics(items, completions, scores) if items else {})
    norm = task.normalized_return(m["reward_mean"], len(completions[0]) if completions else task.num_agents)
    if norm is not None:
        m["normalized_return"] = norm
    return m


def summarize_scores(scores: Scores) -> dict[str, float]:
    t = torch.tensor(list(scores), dtype=torch.float64) if len(scores) else torch.zeros(1, dtype=torch.float64)
    m = {"reward_mean": t.mean().item(), "reward_std": t.std(unbiased=False).item()}
    for name, values in scores.components.items():
        m[f"reward/{name}"] = sum(values) / max(len(values), 1)
    return m
