"""magrpo-crossplay: is a team's cooperation a private convention? Pair agents across runs.

    magrpo-crossplay outputs/train/agree_s0 outputs/train/agree_s1 outputs/train/agree_s2 --out crossplay/agree

Every source (a training run, one of its checkpoints, or an exported team: magrpo.team.team) gives its
agents. Each pairing fills agent slot k with slot k's agent of some source and is evaluated on the
task's eval split as `magrpo-eval` evaluates a team: the same split, sampling and seed for every
pairing (so the cells differ only by who plays). With 2 agents and R sources that is the R x R
matrix (row: agent 1's source, column: agent 2's). With N > 2 agents the default pairings are each
source's own team (self-play) and that team with ONE slot swapped for another source's agent
(`--pairings one_swap`, R + R(R-1)N pairings); `--pairings all` plays all R^N.

    self-play   the mean of the pairings whose agents all come from one source (the diagonal)
    cross-play  the mean of the others
    gap         self-play - cross-play: large when each run learned its own convention (the
                zero-shot coordination gap)

Zero-shot coordination (docs/zsc.md). With `--partners P1 P2 ...`, a population none of the sources
trained with, every source team also plays with every partner: for each partner and each agent
slot, the source's team with that slot filled by the partner's agent. Its mean is the held-out
partner score. Each score comes with the 95% confidence interval of its mean over the sources
(Student's t, t_{0.975, R-1} * s / sqrt(R), R sources; a source's cross-play is the mean of the
pairings it plays in with other sources): the sources are the independently trained teams.

The value of a pairing is the task's primary metric (normalized_return on the coordination suite)
with its std over the eval items. Writes into --out:
    crossplay.csv   one row per pairing: each slot's source, the metric's mean and std, reward_mean,
                    reward_std, whether it is self-play, whether a held-out partner plays in it
    crossplay.md    the matrix (2 agents) or the pairings table, and self-play, cross-play, gap (and
                    the held-out partner score), each with its 95% interval, or `± n/a (why)` where
                    it cannot be estimated: cross-play of 2 sources (each source's cross-play is the
                    mean of the same pairings), or a score of one source
    crossplay.png   a heatmap: host team (row) x partner source (column); for 2 agents the matrix
    crossplay.json  every pairing's full metrics and the settings
--out is never inside a run or an exported team, and one that already holds any of these files is
refused unless --force, which replaces those four and touches nothing else (magrpo.core.writes). Every
source's models are loaded once and stay in memory while the pairings run.
"""

from __future__ import annotations

# isort: off
import magrpo.core.process  # noqa: F401  (first: the process defaults, before torch loads)
# isort: on

import argparse
import csv
import itertools
import json
import logging
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from magrpo.core.checkpoint import read_manifest
from magrpo.core.instances import as_data, select
from magrpo.core.schema import ConfigError, SetupError
from magrpo.core.trust import one_command
from magrpo.core.writes import check_overwrite, publish
from magrpo.launch import check_out_dir, parse_plain_cli, stopped, term_as_interrupt
from magrpo.table.render import pyplot
from magrpo.table.stats import mean_std

log = logging.getLogger("magrpo")

# Keys every source must agree on: the game and its scoring, the team's size and how it plays.
OUTPUTS = ("crossplay.csv", "crossplay.md", "crossplay.png", "crossplay.json")     # what --out receives
MUST_MATCH = ("task", "reward", "algo.topology", "algo.num_turns", "feedback")


@dataclass
class Pairing:
    slots: tuple[int, ...]          # source index per agent slot (partners --partners gives come after the sources)
    held_out: bool = False          # a held-out partner fills a slot

    @property
    def self_play(self) -> bool:
        return len(set(self.slots)) == 1


def held_out_pairings(num_sources: int, num_partners: int, num_agents: int) -> list[Pairing]:
    """Each source's team with one slot filled by a held-out partner's agent, for every partner and
    every slot (partner j is index num_sources + j)."""
    return [Pairing(tuple(num_sources + j if slot == k else i for slot in range(num_agents)), held_out=True)
            for i in range(num_sources) for j in range(num_partners) for k in range(num_agents)]


def policy_weights(kind: str, path: Path) -> dict[str, tuple[str, ...]]:
    """Per policy directory (agent_<k>, policy), the sha256 of its weight files, from the manifest:
    equal for two sources that hold the same trained weights (a run and its export, a copy)."""
    out: dict[str, list[str]] = {}
    for name, meta in read_manifest(path, "team" if kind == "team" else "checkpoint")["files"].items():
        top, _, rest = name.partition("/")
        if rest and (top.startswith("agent_") or top == "policy") and name.endswith((".safetensors", ".bin")):
            out.setdefault(top, []).append(str(meta.get("sha256")))
    return {k: tuple(sorted(v)) for k, v in out.items()}


def check_distinct(sources: list[str], resolved: list[tuple[str, Path]]) -> None:
    """Refuse a source paired with itself, whatever the labels: the same checkpoint or team (by its
    resolved path: a run and its checkpoint, a symlink), or the same weights (their sha256)."""
    weights = [policy_weights(kind, path) for kind, path in resolved]
    for i, j in itertools.combinations(range(len(sources)), 2):
        both = f"{sources[i]!r} and {sources[j]!r}"
        if resolved[i][1] == resolved[j][1]:
            raise ConfigError(f"the sources {both} are one {'team' if resolved[i][0] == 'team' else 'checkpoint'} "
                              f"({resolved[i][1]}); a team paired with itself is self-play, not cross-play: give "
                              f"each source once")
        if weights[i] and weights[i] == weights[j]:
            raise ConfigError(f"the sources {both} hold the same weights (every weight file's sha256 in their "
                              f"manifests agrees: one team, e.g. a run and its export); a team paired with itself "
                              f"is self-play, not cross-play: give each source once")


def check_compatible(teams: list[Any], labels: list[str]) -> None:
    """Refuse sources that do not play the same game with the same team, naming the difference."""
    first = teams[0]
    if first.num_agents < 2:
        raise ConfigError(f"{labels[0]}: a single-model team (algo={first.config.algo.name}) has no agent slots to "
                          f"swap; cross-play needs teams of 2 or more agents")
    for team, label in zip(teams[1:], labels[1:]):
        if team.num_agents != first.num_agents:
            raise ConfigError(f"{label} has {team.num_agents} agent(s) but {labels[0]} has {first.num_agents}; "
                              f"cross-play pairs teams of one size")
        for key in MUST_MATCH:
            a = as_data(select(first.config, key))
            b = as_data(select(team.config, key))
            if a != b:
                what = f"task {a.get('name')!r} vs {b.get('name')!r}" if key == "task" and isinstance(a, dict) \
                    and isinstance(b, dict) and a.get("name") != b.get("name") else f"{key}: {_short(a)} vs {_short(b)}"
                raise ConfigError(f"{labels[0]} and {label} differ in {what}; cross-play pairs agents trained "
                                  f"on one task with one reward, topology, turns and feedback")


def _short(value: Any) -> str:
    text = json.dumps(value, default=str, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."


def pairings(num_sources: int, num_agents: int, mode: str) -> list[Pairing]:
    """Self-play first (source order), then the swaps (module docstring)."""
    selfs = [Pairing((i,) * num_agents) for i in range(num_sources)]
    if mode == "all" or num_agents == 2:
        others = [Pairing(s) for s in itertools.product(range(num_sources), repeat=num_agents) if len(set(s)) > 1]
    elif mode == "one_swap":
        others = [Pairing(tuple(j if slot == k else host for slot in range(num_agents)))
                  for host in range(num_sources) for k in range(num_agents) for j in range(num_sources) if j != host]
    else:
        raise ConfigError(f"--pairings {mode!r} is not allowed; choose one of: one_swap, all")
    return selfs + others


def labels_of(sources: list[str], given: str | None, prefix: str = "") -> list[str]:
    """--labels, else each source's directory name (with its parent's where names repeat), after
    `prefix` (the held-out partners are `partner:NAME`)."""
    if given:
        labels = [x.strip() for x in given.split(",")]
        if len(labels) != len(sources) or any(not x for x in labels):
            raise ConfigError(f"--labels {given!r} gives {len(labels)} label(s) for {len(sources)} source(s)")
    else:
        labels = [Path(s).expanduser().name or s for s in sources]
        if len(set(labels)) < len(labels):
            labels = ["/".join(Path(s).expanduser().parts[-2:]) for s in sources]
    if len(set(labels)) < len(labels):
        raise ConfigError(f"the sources' labels repeat ({', '.join(labels)}); give --labels a,b,...")
    return [prefix + x for x in labels]


def summarize(results: list[tuple[Pairing, dict]], num_sources: int | None = None) -> dict[str, Any]:
    """Self-play, cross-play, their gap and (with partners) the held-out partner score: each the
    mean over its pairings, with the 95% interval of the mean over the sources (module docstring)."""
    R = num_sources if num_sources is not None else 1 + max(s for p, _ in results for s in p.slots if not p.held_out)
    own = [r["mean"] for p, r in results if p.self_play]
    cross = [r["mean"] for p, r in results if not p.self_play and not p.held_out]
    held = [r["mean"] for p, r in results if p.held_out]

    def per_source(keep) -> list[float]:
        out = []
        for i in range(R):
            vals = [r["mean"] for p, r in results if keep(p) and i in p.slots]
            if vals:
                out.append(sum(vals) / len(vals))
        return out

    self_mean = sum(own) / len(own)
    cross_mean = sum(cross) / len(cross) if cross else float("nan")
    out: dict[str, Any] = {"self_play": self_mean, "cross_play": cross_mean, "gap": self_mean - cross_mean}
    scores = [("self_play", lambda p: p.self_play), ("cross_play", lambda p: not p.self_play and not p.held_out)]
    if held:
        out["held_out"] = sum(held) / len(held)
        scores.append(("held_out", lambda p: p.held_out))
    for key, keep in scores:
        values = per_source(keep)
        ci = mean_std(values).ci95
        na = None if ci is not None else f"{len(values)} source(s): one value has no spread"
        if key == "cross_play" and R == 2:
            ci, na = None, TWO_SOURCES
        out[f"{key}_ci95"] = ci
        if na is not None:
            out[f"{key}_ci95_na"] = na
    return out


# Why cross-play of two sources has no interval: each source's cross-play is the mean of the pairings it
# plays in with the other, and with two sources both are the same pairings, so the two values agree by
# construction and their spread (0) says nothing about the sources.
TWO_SOURCES = ("2 sources: each source's cross-play is the mean of the same pairings, so they cannot differ; "
               "3 or more sources give an interval")


def _pm(value: float, ci: float | None, na: str | None = None) -> str:
    """`mean ± ci`, or `mean ± n/a (why)` where the interval cannot be estimated."""
    if ci is not None:
        return f"{value:.3f} ± {ci:.3f}"
    return f"{value:.3f}" + (f" ± n/a ({na})" if na else "")


def _pm_of(summary: dict, key: str) -> str:
    """`_pm` of the summary's `key` with its interval (`key_ci95`) or why it has none (`key_ci95_na`)."""
    return _pm(summary[key], summary.get(f"{key}_ci95"), summary.get(f"{key}_ci95_na"))


def host_partner_matrix(results: list[tuple[Pairing, dict]], num_sources: int, num_agents: int) -> list[list[float]]:
    """[row][col]: for 2 agents, agent 1 from row and agent 2 from col; for more, the host team
    `row` with slots from partner `col` (mean over the one-swap pairings; the diagonal self-play)."""
    if num_agents == 2:
        m = [[float("nan")] * num_sources for _ in range(num_sources)]
        for p, r in results:
            m[p.slots[0]][p.slots[1]] = r["mean"]
        return m
    cells: dict[tuple[int, int], list[float]] = {}
    for p, r in results:
        counts = {s: p.slots.count(s) for s in set(p.slots)}
        host = max(counts, key=lambda s: (counts[s], -s))
        partners = [s for s in p.slots if s != host]
        col = partners[0] if partners and len(set(partners)) == 1 and len(partners) == 1 else (host if not partners else None)
        if col is not None:
            cells.setdefault((host, col), []).append(r["mean"])
    return [[sum(cells[(i, j)]) / len(cells[(i, j)]) if (i, j) in cells else float("nan") for j in range(num_sources)]
            for i in range(num_sources)]


def write_outputs(out: Path, labels: list[str], results: list[tuple[Pairing, dict]], summary: dict,
                  settings: dict) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    n = len(results[0][0].slots)
    metric = results[0][1]["metric"]
    with open(out / "crossplay.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([f"agent_{k + 1}" for k in range(n)] + ["metric", "mean", "std", "reward_mean", "reward_std",
                                                            "num_items", "self_play", "held_out"])
        for p, r in results:
            w.writerow([labels[s] for s in p.slots] + [metric, f"{r['mean']:.6f}", f"{r['std']:.6f}",
                                                      f"{r['metrics']['reward_mean']:.6f}",
                                                      f"{r['metrics']['reward_std']:.6f}", r["num_items"],
                                                      int(p.self_play), int(p.held_out)])
    R = len(settings["sources"])
    among = [(p, r) for p, r in results if not p.held_out]
    matrix = host_partner_matrix(among, R, n)
    by_slots = {p.slots: r for p, r in results}
    lines = [f"# Cross-play: {settings['task']}, {metric} (mean ± std over {settings['num_items']} eval items)", ""]
    if n == 2:
        lines += ["Row: agent 1's source; column: agent 2's source. The diagonal is self-play.", "",
                  "| agent 1 \\ agent 2 | " + " | ".join(labels[:R]) + " |", "|---|" + "---|" * R]
        for i, a in enumerate(labels[:R]):
            cells = []
            for j in range(R):
                got = by_slots.get((i, j))
                cell = f"{got['mean']:.3f} ± {got['std']:.3f}" if got else ""
                cells.append(f"**{cell}**" if i == j and got else cell)
            lines.append(f"| {a} | " + " | ".join(cells) + " |")
    else:
        lines += ["| " + " | ".join(f"agent {k + 1}" for k in range(n)) + " | mean ± std |",
                  "|" + "---|" * (n + 1)]
        for p, r in among:
            lines.append("| " + " | ".join(labels[s] for s in p.slots) + f" | {r['mean']:.3f} ± {r['std']:.3f} |")
    held = [(p, r) for p, r in results if p.held_out]
    if held:
        lines += ["", "Held-out partners (a source's team with one slot filled by a partner's agent):", "",
                  "| " + " | ".join(f"agent {k + 1}" for k in range(n)) + " | mean ± std |", "|" + "---|" * (n + 1)]
        lines += ["| " + " | ".join(labels[s] for s in p.slots) + f" | {r['mean']:.3f} ± {r['std']:.3f} |"
                  for p, r in held]
    lines += ["", f"- self-play mean: {_pm_of(summary, 'self_play')}",
              f"- cross-play mean: {_pm_of(summary, 'cross_play')}",
              f"- gap (self-play - cross-play): {summary['gap']:.3f}"]
    if "held_out" in summary:
        lines.append(f"- held-out partner mean: {_pm_of(summary, 'held_out')} "
                     f"({len(settings['partners'])} partner team(s) none of the sources trained with)")
    lines += ["", "Intervals: 95% of the mean over the sources (Student's t)." if len(settings["sources"]) > 1 else "",
              "Sources: " + "; ".join(f"{lab} = {src}" for lab, src in zip(labels, settings["sources"]))]
    if settings.get("partners"):
        lines.append("Held-out partners: " + "; ".join(f"{lab} = {src}" for lab, src in
                                                       zip(labels[len(settings["sources"]):], settings["partners"])))
    lines.append("")
    (out / "crossplay.md").write_text("\n".join(lines))
    (out / "crossplay.json").write_text(json.dumps({
        **settings, "labels": labels, "metric": metric, **summary, "matrix": matrix,
        "pairings": [{"slots": [labels[s] for s in p.slots], "self_play": p.self_play, "held_out": p.held_out, **r}
                     for p, r in results]},
        indent=2, default=str) + "\n")
    _heatmap(out / "crossplay.png", matrix, labels[:R], metric, n, summary)
    return [out / name for name in OUTPUTS]


def _heatmap(path: Path, matrix: list[list[float]], labels: list[str], metric: str, n: int, summary: dict) -> None:
    plt = pyplot()

    R = len(labels)
    fig, ax = plt.subplots(figsize=(1.2 * R + 2.5, 1.0 * R + 2.0))
    im = ax.imshow(matrix, cmap="viridis", vmin=min(0.0, *[v for row in matrix for v in row if v == v]),
                   vmax=max(1.0, *[v for row in matrix for v in row if v == v]))
    ax.set_xticks(range(R), labels, rotation=30, ha="right")
    ax.set_yticks(range(R), labels)
    ax.set_xlabel("agent 2's source" if n == 2 else "partner (one slot swapped in)")
    ax.set_ylabel("agent 1's source" if n == 2 else "host team")
    for i in range(R):
        for j in range(R):
            v = matrix[i][j]
            if v == v:
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", color="white" if v < 0.6 else "black")
    ax.set_title(f"{metric}: self {summary['self_play']:.2f}, cross {summary['cross_play']:.2f}, "
                 f"gap {summary['gap']:.2f}", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def crossplay(sources: list[str], out: str | Path, labels: str | None = None, num_items: int | None = None,
              num_samples: int = 1, seed: int = 0, split: str = "eval", batch_size: int = 64, greedy: bool = False,
              pairing_mode: str = "one_swap", device: str | None = None, force: bool = False,
              partners: list[str] | None = None) -> dict[str, Any]:
    """Everything `magrpo-crossplay` does (module docstring); returns crossplay.json's content.
    `partners`: held-out partner teams (runs, checkpoints or exported teams) none of the sources
    trained with."""
    partners = list(partners or [])
    args = argparse.Namespace(num_samples=num_samples, seed=seed, batch_size=batch_size, greedy=greedy)
    if len(sources) < 2:
        raise ConfigError(f"cross-play needs at least 2 sources (runs or exported teams), got {len(sources)}")
    if num_samples < 1 or batch_size < 1 or (num_items is not None and num_items < 1):
        raise ConfigError("--num-samples, --batch-size and --num-items must be at least 1")
    if split not in ("eval", "train"):
        raise ConfigError(f"--split {split!r} is not allowed; choose one of: eval, train")
    out = Path(out).expanduser()
    check_out_dir(out, [*sources, *partners])       # never into a run, a source's or any other
    check_overwrite(out, OUTPUTS, force)  # nor over a file, unless --force
    if pairing_mode not in ("one_swap", "all"):
        raise ConfigError(f"--pairings {pairing_mode!r} is not allowed; choose one of: one_swap, all")
    from magrpo.evaluation.pairing import evaluate_pairing, load_source, resolve_source  # noqa: PLC0415  start-up: torch loads only where a model does; magrpo-crossplay's --help and argument checks answer without it

    everyone = [*sources, *partners]
    resolved = [resolve_source(s) for s in everyone]
    check_distinct(everyone, resolved)   # before the labels: `R R` repeats a source, not only a label
    names = labels_of(sources, labels) + labels_of(partners, None, prefix="partner:") if partners else \
        labels_of(sources, labels)
    if len(set(names)) < len(names):
        raise ConfigError(f"the sources' and partners' labels repeat ({', '.join(names)}); give --labels a,b,...")
    teams = [load_source(s, device, r) for s, r in zip(everyone, resolved)]
    check_compatible(teams, names)
    n = teams[0].num_agents
    plan = pairings(len(sources), n, pairing_mode) + held_out_pairings(len(sources), len(partners), n)
    if len(plan) > 512:
        raise ConfigError(f"{len(plan)} pairings (R={len(teams)} sources, N={n} agents, --pairings "
                          f"{pairing_mode}); use --pairings one_swap or fewer sources")
    items = teams[0].task.load(split)
    items = items[:num_items] if num_items else items
    if not items:
        raise ConfigError(f"split {split!r} of task {teams[0].task.name!r} has no items")
    results, started = [], time.time()
    for p in tqdm(plan, desc="cross-play", unit="pairing", disable=None):
        r = evaluate_pairing(teams, p.slots, items, args)
        results.append((p, r))
        log.info("%s: %s=%.3f ± %.3f", " + ".join(names[s] for s in p.slots), r["metric"], r["mean"], r["std"])
    summary = summarize(results, len(sources))
    # Each source and partner also relative to --out: magrpo-table matches them to its runs, also after
    # the whole directory tree moved (magrpo.table.zsc).
    here = os.path.realpath(out)

    def beside(paths) -> list[str]:
        return [os.path.relpath(os.path.realpath(Path(s).expanduser()), here) for s in paths]

    settings = {"task": teams[0].task.name, "sources": [str(s) for s in sources],
                "partners": [str(s) for s in partners], "source_dirs": beside(sources),
                "partner_dirs": beside(partners), "num_agents": n,
                "num_items": len(items), "num_samples": num_samples, "seed": seed, "split": split,
                "greedy": greedy, "pairings_mode": pairing_mode, "wall_seconds": time.time() - started}
    publish(out, lambda stage: write_outputs(stage, names, results, summary, settings), force)
    return json.loads((out / "crossplay.json").read_text())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="magrpo-crossplay", description=(
        "Pair agents across training runs or exported teams and evaluate every pairing on the task's eval "
        "split: the self-play vs cross-play matrix of a task (is the learned cooperation a private convention?)."))
    p.add_argument("sources", nargs="+", metavar="RUN_OR_TEAM",
                   help="training run directories, checkpoints, or exported teams (directories or hub ids)")
    p.add_argument("--out", required=True, help="directory for crossplay.{md,csv,png,json}; never inside a run "
                   "or exported team")
    p.add_argument("--force", action="store_true", help="replace crossplay.{md,csv,png,json} where --out already "
                   "holds them (nothing else there is touched)")
    p.add_argument("--labels", default=None, help="comma-separated names of the sources (default: directory names)")
    p.add_argument("--partners", nargs="+", default=None, metavar="RUN_OR_TEAM",
                   help="held-out partners: teams none of the sources trained with (another seed's runs, another "
                        "method's); each source's team plays with each of them, one slot at a time, for the "
                        "held-out partner score")
    p.add_argument("--num-items", type=int, default=None, help="eval items (default: the whole split)")
    p.add_argument("--num-samples", type=int, default=1, help="samples per item (default 1, as magrpo-eval)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed, the same for every pairing (default 0)")
    p.add_argument("--split", default="eval", choices=["eval", "train"])
    p.add_argument("--batch-size", type=int, default=64, help="items generated at once (default 64)")
    p.add_argument("--greedy", action="store_true", help="greedy decoding instead of the runs' eval sampling")
    p.add_argument("--pairings", default="one_swap", choices=["one_swap", "all"],
                   help="with 3+ agents: each team with one slot swapped (default) or every combination")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 ... (default: cuda when there is one)")
    return p


@one_command
def main(argv: list[str] | None = None) -> int:
    with term_as_interrupt():       # a SIGTERM stops it as Ctrl-C does
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    args = parse_plain_cli(build_parser(), argv, dirs=lambda a: [*a.sources, *(a.partners or [])])
    try:
        res = crossplay(args.sources, args.out, labels=args.labels, num_items=args.num_items,
                        num_samples=args.num_samples, seed=args.seed, split=args.split, batch_size=args.batch_size,
                        greedy=args.greedy, pairing_mode=args.pairings, device=args.device, force=args.force,
                        partners=args.partners)
    except ConfigError as e:
        print(f"magrpo-crossplay: error: {e}", file=sys.stderr)
        return 2
    except SetupError as e:
        print(f"magrpo-crossplay: setup error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:        # a PluginInterrupt names the plugin it was importing
        how, code = stopped(e)
        again = shlex.join(["magrpo-crossplay", *(sys.argv[1:] if argv is None else argv)])
        print(f"magrpo-crossplay: {e if str(e) else how}; nothing was written; run it again with: {again}",
              file=sys.stderr)
        return code
    print((Path(args.out) / "crossplay.md").read_text())
    held = f", held-out partners {res['held_out']:.3f}" if "held_out" in res else ""
    print(f"magrpo-crossplay: wrote {args.out}/crossplay.{{md,csv,png,json}} (self-play {res['self_play']:.3f}, "
          f"cross-play {res['cross_play']:.3f}, gap {res['gap']:.3f}{held})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
