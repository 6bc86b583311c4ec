"""Cross-play's heavy half: its sources loaded as teams, and one pairing of their agents played.

magrpo-crossplay (magrpo/cli/crossplay.py) parses, checks and plans without torch; what it plays goes
through here: `resolve_source` (a run, a checkpoint or an exported team, verified, as one resolved
path), `load_source` (that source as a `Team`) and `evaluate_pairing` (slot k of the team filled by
source `slots[k]`'s agent k, evaluated as `magrpo-eval` evaluates a team).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from magrpo.core import trust
from magrpo.core.checkpoint import is_team_dir, missing_checkpoint
from magrpo.core.schema import ConfigError
from magrpo.evaluation.loop import answer_metrics, eval_metrics
from magrpo.rollout.answers import collect_answers
from magrpo.rollout.turns import take
from magrpo.team.checks import local_team, read_team
from magrpo.team.team import Team, checkpoint_of


def resolve_source(source: str) -> tuple[str, Path]:
    """("team", the exported team's directory) or ("run", the verified checkpoint a run or checkpoint
    path names), resolved (symlinks followed), so that one team reached by two paths is one path."""
    p = Path(source).expanduser()
    if is_team_dir(p) or (not p.exists() and source.count("/") == 1 and not source.startswith((".", "~"))):
        root = local_team(source)
        trust.named_on_this_command([root])     # a hub id the command line names: its downloaded copy
        read_team(root)                 # whole, before anything is loaded
        return "team", root.resolve()
    if not p.exists():
        raise ConfigError(f"{source}: {missing_checkpoint(p) or 'no such run, checkpoint or exported team'}")
    return "run", checkpoint_of(p, None, source).resolve()


def load_source(source: str, device: str | None, resolved: tuple[str, Path] | None = None) -> Any:
    """A run directory, a checkpoint or an exported team (a directory or a hub repo id) as a Team."""
    kind, path = resolved or resolve_source(source)
    if kind == "team":
        return Team.from_pretrained(path, device=device)
    return Team.from_run(path, device=device, key=source)


def evaluate_pairing(teams: list[Any], slots: tuple[int, ...], items: list[dict], args: Any) -> dict:
    """The team whose agent k is `teams[slots[k]]`'s agent k, on the items (`args`: num_samples,
    greedy, batch_size, seed): the metric's mean, its std over items, and every metric."""
    host = teams[slots[0]]
    agents = [teams[src].agents[k] for k, src in enumerate(slots)]
    sampling = host.sampling(args.num_samples, do_sample=False if args.greedy else None)
    ans = collect_answers(agents, host.task, items, sampling, args.batch_size, seed=args.seed + 7919,
                          scheme="team", turns=host.turns, feedback=host.feedback)
    metrics = eval_metrics(host.task, ans.per_turn, ans.tokens, ans.gen_s, ans.reward_s, ans.degraded, len(items))
    metric = host.task.primary_metric
    its, _, completions, scores = ans.final
    per_item, S = [], sampling.num_generations
    for start in range(0, len(its), S):
        rows = list(range(start, start + S))
        m = answer_metrics(host.task, its[start:start + S], completions[start:start + S], take(scores, rows))
        per_item.append(m.get(metric, m["reward_mean"]))
    mean = metrics.get(metric, metrics["reward_mean"])
    std = (sum((v - sum(per_item) / len(per_item)) ** 2 for v in per_item) / len(per_item)) ** 0.5 if per_item else 0.0
    return {"metric": metric, "mean": mean, "std": std, "num_items": len(items), "metrics": metrics}
