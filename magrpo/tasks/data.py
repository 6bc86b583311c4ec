"""Loading task data through `datasets`: a hub id with the paper's split, or a local file.

`task.data` config node (every task that reads a dataset has one):

    hub_id: trl-lib/tldr          # used when `path` is null
    config_name: null             # hub dataset configuration (e.g. "sanitized" for mbpp)
    path: null                    # local .jsonl/.json/.parquet/.csv file, or a saved `datasets` dir
    train_split: "train[:1000]"   # split expressions in `datasets` slicing syntax
    eval_split: "test[:1000]"
    limit: null                   # keep at most this many items per split (quick runs)

A local file holds one split; its rows are sliced with the same expressions (`train[:1000]` on a
file means rows 0..999 of that file), so a local copy of the hub data reproduces the paper's splits.
A saved `datasets` directory (DatasetDict) is indexed by split name.

The train and eval expressions may not select the same rows of one source (`check_held_out`, at
start-up): on a file `train[:1000]` and `test[:1000]` are both its first 1000 rows, and the
evaluation would score rows the team trained on.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from magrpo.core.schema import ConfigError, SetupError, at_least, option
from magrpo.models import hub

LOCAL_SUFFIXES = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
_SPLIT_RE = re.compile(r"^\s*(?P<name>[\w.-]+)\s*(\[(?P<lo>-?\d*)\s*:\s*(?P<hi>-?\d*)\])?\s*$")


class DataUnavailableError(SetupError):
    """The data cannot be loaded here; the message says what to download or which path to set."""


class UnreadableDataError(DataUnavailableError):
    """A local data file its reader cannot parse; `reason` is the parser's own words."""

    def __init__(self, path: Path, reader: str, reason: str):
        self.path, self.reader, self.reason = path, reader, reason
        super().__init__(f"task.data.path={str(path)!r} cannot be read as {reader}: {reason}")


def root_cause(e: BaseException) -> str:
    """`Type: first line` of the innermost exception behind `e`: datasets wraps a parse error
    ("JSON parse error: ... in row 0") in a generic "error occurred while generating the dataset"."""
    while (inner := e.__cause__ or e.__context__) is not None and inner is not e:
        e = inner
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"


def parse_split(expr: str) -> tuple[str, slice]:
    m = _SPLIT_RE.match(expr)
    if not m:
        raise ValueError(f"split expression {expr!r} is not of the form NAME or NAME[lo:hi]")
    lo = int(m["lo"]) if m["lo"] else None
    hi = int(m["hi"]) if m["hi"] else None
    return m["name"], slice(lo, hi)


def is_split_expr(expr: Any, joined: bool = False) -> bool:
    """Whether `expr` parses as NAME or NAME[lo:hi] (with `joined`, several joined by "+")."""
    if not isinstance(expr, str):
        return False
    return all(_SPLIT_RE.match(part) for part in (expr.split("+") if joined else [expr]))


def split_option(default: str, joined: bool = False, *, help: str = "") -> Any:
    """A config field holding a split expression, checked at start-up."""
    return option(default, check=lambda v: is_split_expr(v, joined),
                  allowed="NAME or NAME[lo:hi]" + (", parts joined by '+'" if joined else "")
                  + " (quote it on the command line: key='test[:32]')", help=help)


def limit_option(*, help: str = "") -> Any:
    return option(None, check=lambda v: v is None or v >= 1, allowed=">= 1, or null for all rows", help=help)


@dataclass
class DataKeys:
    """`task.data`'s keys for a task that reads a dataset: where its rows come from and which of
    them. A task's data schema composes it and overrides a default where its dataset differs."""

    path: str | None = option(None, help="a local file or saved dataset: wins over the hub")
    hub_id: str | None = option(None, help="the hub dataset read when no path is given")
    config_name: str | None = option(None, help="the hub dataset's configuration")
    train_split: str = split_option("train", help="the training rows, a split expression")
    eval_split: str = split_option("test", help="the eval rows, in the same syntax")
    limit: int | None = limit_option(help="keep at most this many items per split (quick runs); null = all")

    @classmethod
    def check_node(cls, node: Any, prefix: str) -> None:
        data = data_keys(node, cls)
        check_data_path(data, prefix)
        check_held_out(data, prefix)


@dataclass
class BuiltinKeys:
    builtin: bool = option(True, help="the package's own offline items (no download); false = the dataset")


@dataclass
class BuiltinFileKeys(BuiltinKeys):
    """A built-in set that is a file of the package (the writing tasks'), and which of its rows
    train and which evaluate; a task whose built-in items are generated has only `builtin`."""

    builtin_train_split: str = split_option("train[:32]", help="the built-in file's training rows")
    builtin_eval_split: str = split_option("train[32:]", help="the built-in file's eval rows")


Keys = TypeVar("Keys", bound=DataKeys)


def data_keys(node: Any, schema: type[Keys]) -> Keys:
    """A `task.data` node as an instance of its schema: a schema's `check_node` is handed the typed
    config node while the config is checked (magrpo.core.schema.check_values), the task its instance."""
    if isinstance(node, schema):
        return node
    from magrpo.core.instances import instance  # noqa: PLC0415  start-up: it loads OmegaConf, and the tasks load without it

    out: Keys = instance(node, schema)
    return out


@dataclass
class ItemCountKeys:
    """The number of items of a task whose items are generated (or drawn from a built-in list)."""

    num_train: int = at_least(1, 32, help="training items")
    num_eval: int = at_least(1, 16, help="eval items")


def require_columns(task: str, data: DataKeys, rows: list[dict[str, Any]], needs: list[tuple[str, ...]]) -> None:
    """The data has every column of one of `needs` (each a set of column names that a row of `task`
    may have), or one line names the columns it has and the ones expected, and where the data came
    from (task.data.path, or the hub id)."""
    if not rows:
        return
    have = set(rows[0])
    if any(set(cols) <= have for cols in needs):
        return
    path = data.path
    where = f"task.data.path={str(path)!r}" if path else f"the hub dataset {data.hub_id!r}"
    wanted = " or ".join("(" + ", ".join(cols) + ")" for cols in needs)
    raise DataUnavailableError(f"task {task}: {where} has columns {', '.join(sorted(have)) or '(none)'}; a {task} row "
                               f"needs {wanted} (docs/tasks.md, \"Your own data\")")


def check_data_path(data: DataKeys, prefix: str) -> None:
    """`task.data.path`, when set, must exist: a missing file is a config error, not a crash mid-setup."""
    path = data.path
    if path and not Path(str(path)).expanduser().exists():
        raise ConfigError(f"{prefix}path={str(path)!r}: no such file or directory; give a local "
                          f"{'/'.join(sorted(LOCAL_SUFFIXES))} file or a directory saved with Dataset.save_to_disk")


# -- train rows and eval rows apart ----------------------------------------------------------------

ONE_SPLIT = "the name before '[' is not read"      # why a file's `train[...]` and `test[...]` meet


def selected_rows(expr: str, length: int, limit: int | None = None) -> list[tuple[str, range]]:
    """The rows a split expression selects from splits of `length` rows: (split name, rows) per part
    joined with "+", then the first `limit` of them in all (as load_split and the coding tasks read)."""
    out, left = [], limit
    for part in str(expr).split("+"):
        name, sl = parse_split(part)
        rows = range(length)[sl]
        if left is not None:
            rows = rows[:left]
            left -= len(rows)
        out.append((name, rows))
    return out


def shared_rows(train_expr: str, eval_expr: str, one_split: bool, limit: int | None = None) -> tuple[str, str] | None:
    """(split name, rows as a slice) that both expressions select, or None when they select none in
    common. `one_split`: the source holds one split whose rows both slice, whatever name they give (a
    file, a saved Dataset); else the names are the source's splits (a hub dataset, a saved
    DatasetDict). Compared on splits longer than every bound, so a bound from the end (-100) and
    one from the start (1000) never meet by the split's length alone."""
    bounds = [abs(b) for part in f"{train_expr}+{eval_expr}".split("+")
              for b in (parse_split(part)[1].start, parse_split(part)[1].stop) if b is not None]
    n = 2 * (max(bounds, default=0) + (limit or 0)) + 2
    for name_a, a in selected_rows(train_expr, n, limit):
        for name_b, b in selected_rows(eval_expr, n, limit):
            lo, hi = max(a.start, b.start), min(a.stop, b.stop)
            if lo < hi and (one_split or name_a == name_b):
                def bound(i: int) -> str:
                    return str(i) if i <= n // 2 else ("" if i == n else str(i - n))
                return name_a, f"[{bound(lo)}:{bound(hi)}]"
    return None


def check_held_out(data: DataKeys, prefix: str, package: str | None = None) -> None:
    """The train and eval splits of `task.data` select no row in common (module docstring): one line
    naming both slices, the rows they share and a disjoint pair. `package`: the words for the one-split
    source the task reads when neither a path nor a hub id is set (HumanEval from its package)."""
    keys = ("train_split", "eval_split")
    train_expr, eval_expr = data.train_split, data.eval_split
    path = data.path
    if path:
        p = Path(str(path)).expanduser()
        one_split = not (p / "dataset_dict.json").is_file()    # a file or a saved Dataset: one split
        where = f"{prefix}path={str(path)!r}" + (f" (it holds one split: {ONE_SPLIT})" if one_split else "")
    elif isinstance(data, BuiltinKeys) and data.builtin:
        if not isinstance(data, BuiltinFileKeys):      # items generated, no rows to share
            return
        keys, one_split, where = ("builtin_train_split", "builtin_eval_split"), True, "the built-in file"
        train_expr, eval_expr = data.builtin_train_split, data.builtin_eval_split
    elif data.hub_id:
        one_split, where = False, f"the hub dataset {data.hub_id!r}"
    elif package:
        one_split, where = True, f"{package} (one split: {ONE_SPLIT})"
    else:
        return
    train_expr, eval_expr = str(train_expr), str(eval_expr)
    shared = shared_rows(train_expr, eval_expr, one_split, data.limit)
    if shared is None:
        return
    name, rows = shared
    split = "" if one_split else f" of split {name!r}"
    raise ConfigError(f"{prefix}{keys[0]}={train_expr!r} and {prefix}{keys[1]}={eval_expr!r} both select rows "
                      f"{rows}{split} of {where}, so the evaluation would score rows the team trained on; give "
                      f"disjoint slices, e.g. {prefix}{keys[0]}='{name}[:-100]' {prefix}{keys[1]}='{name}[-100:]' "
                      f"(the last 100 rows held out)")


def _rows(ds: Any, sl: slice) -> list[dict[str, Any]]:
    idx = range(len(ds))[sl]
    return [dict(ds[i]) for i in idx]


def _datasets():
    """The `datasets` library, imported where a data set is read from a file or the hub."""
    import datasets  # noqa: PLC0415  start-up: datasets loads only for a dataset read from the hub or a file

    return datasets


def load_local(path: str | os.PathLike, split_expr: str) -> list[dict[str, Any]]:
    datasets = _datasets()
    p = Path(path).expanduser()
    if not p.exists():
        raise DataUnavailableError(f"task.data.path={str(path)!r} does not exist")
    name, sl = parse_split(split_expr)
    if p.is_dir():
        ds = datasets.load_from_disk(str(p))
        if isinstance(ds, datasets.DatasetDict):
            if name not in ds:
                raise DataUnavailableError(
                    f"split {name!r} is not in the saved dataset at {p}; it has: {', '.join(ds)}")
            ds = ds[name]
        return _rows(ds, sl)
    builder = LOCAL_SUFFIXES.get(p.suffix.lower())
    if builder is None:
        raise DataUnavailableError(
            f"task.data.path={str(path)!r}: unsupported file type {p.suffix!r}; use one of "
            f"{', '.join(sorted(LOCAL_SUFFIXES))} or a directory saved with Dataset.save_to_disk")
    logger = datasets.logging.get_logger("datasets")
    level = logger.level
    logger.setLevel(logging.CRITICAL)   # its parse-error log line would repeat the error raised below
    try:
        with hub.quiet_bars("datasets"):     # "Generating train split" for a small local file is noise
            ds = datasets.load_dataset(builder, data_files=str(p), split="train")
    except Exception as e:              # datasets raises many kinds for a file it cannot parse
        raise UnreadableDataError(p, builder, root_cause(e)) from e
    finally:
        logger.setLevel(level)
    return _rows(ds, sl)


def load_hub(hub_id: str, split_expr: str, config_name: str | None = None) -> list[dict[str, Any]]:
    datasets = _datasets()
    hub.ensure_mode()       # offline: the cache only, and a fast failure
    try:
        with hub.quiet_bars("datasets"):
            ds = datasets.load_dataset(hub_id, config_name, split=split_expr)
    except Exception as e:  # connection, offline mode, missing cache: all mean "not here"
        if hub.offline_reason() is not None:
            raise DataUnavailableError(hub.unreachable_hint("dataset", hub_id, "task.data.path", config_name)) from e
        raise DataUnavailableError(
            f"could not load hub dataset {hub_id!r} (split {split_expr!r}): {type(e).__name__}: {e}\n"
            f"Download it where the hub is reachable, e.g. "
            f"`python -c \"import datasets; datasets.load_dataset({hub_id!r}"
            f"{', ' + repr(config_name) if config_name else ''}).save_to_disk('DIR')\"`, "
            f"then set task.data.path=DIR") from e
    return [dict(r) for r in ds]


def load_split(data_cfg: DataKeys, split: str) -> list[dict[str, Any]]:
    """Rows for split "train" or "eval" as described by a `task.data` node."""
    expr = data_cfg.train_split if split == "train" else data_cfg.eval_split
    if data_cfg.path:
        rows = load_local(data_cfg.path, expr)
    elif data_cfg.hub_id:
        rows = load_hub(data_cfg.hub_id, expr, data_cfg.config_name)
    else:
        raise DataUnavailableError("task.data needs either `path` (a local file) or `hub_id`")
    limit = data_cfg.limit
    return rows[:limit] if limit else rows
