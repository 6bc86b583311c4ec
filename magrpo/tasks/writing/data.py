"""Data of the writing tasks: the built-in offline set, a hub dataset, or a local copy.

`task.data` node (one code path for all three sources, `magrpo.tasks.data.load_split`):

    builtin: true                    # the package's own set (builtin_<task>.jsonl), no download
    builtin_train_split: train[:32]  # rows of that file, in split-expression syntax
    builtin_eval_split: train[32:]
    hub_id: trl-lib/tldr             # used when builtin is false
    path: null                       # a local file or saved dataset: wins over builtin and hub
    train_split / eval_split         # the paper's splits, for the hub id or the local copy
    text_column / reference_column   # null: the first column present of TEXT_COLUMNS[task]...

The built-in files use the hub datasets' columns (tldr: `prompt` holds the post in TRL's
"SUBREDDIT/TITLE/POST/TL;DR:" layout and `completion` the reference TL;DR; arxiv:
`article_id`, `abstract_text`), so nothing downstream knows which source an item came from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from magrpo.config.groups import TaskConfig
from magrpo.core.schema import ConfigError, option
from magrpo.tasks.data import (
    BuiltinFileKeys,
    DataKeys,
    DataUnavailableError,
    check_data_path,
    check_held_out,
    data_keys,
    load_split,
    split_option,
)

PACKAGE_DIR = Path(__file__).parent
BUILTIN_FILES = {"tldr": PACKAGE_DIR / "builtin_tldr.jsonl", "arxiv": PACKAGE_DIR / "builtin_arxiv.jsonl"}

# Candidate columns, first present wins. The arxiv hub set stores `abstract_text` (in the raw
# arXiv dump it is a list of sentences; both forms are accepted).
TEXT_COLUMNS = {"tldr": ("prompt", "post", "content", "text"),
                "arxiv": ("abstract_text", "abstract", "text", "prompt")}
REFERENCE_COLUMNS = {"tldr": ("completion", "summary", "tldr", "reference"),
                     "arxiv": ("reference", "introduction")}


@dataclass
class WritingDataConfig(BuiltinFileKeys, DataKeys):
    """builtin: the package's own offline set; the splits are the paper's, of the hub id or a local copy."""

    hub_id: str | None = option("trl-lib/tldr", help="the hub dataset read when builtin is false")
    train_split: str = split_option("train[:1000]",
                                    help="the paper's training split of the hub id or local copy")
    eval_split: str = split_option("test[:1000]", help="the paper's eval split of the hub id or local copy")
    text_column: str | None = option(None,
                                     help="column of the text; null = the first "
                                          "present of the task's usual names")
    reference_column: str | None = option(None,
                                          help="column of the reference; null = the "
                                               "first present of the usual names")

    @classmethod
    def check_node(cls, node: Any, prefix: str) -> None:
        data = data_keys(node, cls)
        check_data_path(data, prefix)
        if not data.builtin and not data.path and not data.hub_id:
            raise ConfigError(f"{prefix}builtin=false with neither {prefix}path nor {prefix}hub_id set: "
                              f"give a local file (path=...), a hub dataset (hub_id=...), or builtin=true")
        check_held_out(data, prefix)


@dataclass
class TldrDataConfig(WritingDataConfig):
    pass


@dataclass
class ArxivDataConfig(WritingDataConfig):
    hub_id: str | None = option("LovelyBuggies/arXiv_abstract",
                                help="the hub dataset read when builtin is false")
    eval_split: str = split_option("val[:1000]", help="the paper's eval split of the hub id or local copy")


@dataclass
class TldrTaskConfig(TaskConfig):
    name: str = "tldr"
    data: TldrDataConfig = field(default_factory=TldrDataConfig)


@dataclass
class ArxivTaskConfig(TaskConfig):
    name: str = "arxiv"
    data: ArxivDataConfig = field(default_factory=ArxivDataConfig)


def _as_text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return " ".join(str(v).strip() for v in value if v is not None)
    return "" if value is None else str(value)


def _pick(row: dict[str, Any], explicit: str | None, candidates: tuple[str, ...], key: str) -> str | None:
    if explicit:
        if explicit not in row:
            raise DataUnavailableError(f"task.data.{key}={explicit!r} is not a column of the data; "
                                       f"it has: {', '.join(row)}")
        return explicit
    return next((c for c in candidates if c in row), None)


def load_items(task: str, data_cfg: WritingDataConfig, split: str) -> list[dict[str, Any]]:
    """Items of `split` ("train"/"eval"): the source columns plus `id`, `text`, `reference`."""
    source: DataKeys = data_cfg
    if not data_cfg.path and data_cfg.builtin:     # the built-in file, read as a local copy is
        source = DataKeys(path=str(BUILTIN_FILES[task]), hub_id=None, config_name=None,
                          train_split=data_cfg.builtin_train_split, eval_split=data_cfg.builtin_eval_split,
                          limit=data_cfg.limit)
    try:
        rows = load_split(source, split)
    except DataUnavailableError as e:
        raise DataUnavailableError(f"{e}\n(task {task}: leave task.data.builtin=true, the default, "
                                   f"to train on the built-in offline set)") from e
    if not rows:
        raise DataUnavailableError(f"task {task}: the {split} split is empty "
                                   f"({source.train_split if split == 'train' else source.eval_split})")
    text_col = _pick(rows[0], data_cfg.text_column, TEXT_COLUMNS[task], "text_column")
    if text_col is None:
        raise DataUnavailableError(f"task {task}: no text column among {', '.join(TEXT_COLUMNS[task])} in the data "
                         f"(it has: {', '.join(rows[0])}); set task.data.text_column")
    ref_col = _pick(rows[0], data_cfg.reference_column, REFERENCE_COLUMNS[task], "reference_column")
    items = []
    for i, row in enumerate(rows):
        ref = _as_text(row.get(ref_col)).strip() if ref_col else ""
        items.append({**row, "id": f"{task}/{split}/{i}", "text": _as_text(row[text_col]),
                      "reference": ref or None})
    return items
