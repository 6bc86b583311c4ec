"""The tuning records of `magrpo-paper --tune-trials K` for `magrpo-table --tuning DIR`.

`magrpo-paper` tunes each trained row of a table on seed 0 with Hydra's Optuna sweeper before the
seeds run, and records each (task, row) as DIR/<task>_<row>.json (magrpo.cli.paper.record_tuning):

    {"task", "row", "experiment", "objective", "direction", "seed", "n_trials",
     "space":  {override key: Optuna spec, e.g. "optimizer.lr": "tag(log, interval(1e-4, 3e-2))"},
     "trials": [{"number", "params": {key: value}, "value" (null: no final eval), "status", "dir"}],
     "best":   {"params": {key: value}, "value"} from the sweep's optimization_results.yaml, or null,
     "error":  why there is no best (null when there is one)}

Here they are read back and written as tuning.md next to the table: what each row searched,
how many trials finished, the values its seeds ran with, and the objective those values reached.
The trial runs themselves (DIR/<task>_<row>/<n>/) are not rows of the table.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from magrpo.core.records import load_json
from magrpo.core.schema import ConfigError
from magrpo.table.render import md_escape
from magrpo.table.runs import TableError


def read_records(folder: Path) -> list[dict[str, Any]]:
    """Every DIR/*.json tuning record, in file-name order. TableError for a folder that is not
    there or a record that cannot be read (the table would otherwise hide how its rows were tuned)."""
    if not folder.is_dir():
        raise TableError(f"--tuning {folder}: no such directory")
    records = []
    for path in sorted(folder.glob("*.json")):
        try:
            record = load_json(path)
        except ConfigError as e:
            raise TableError(f"cannot read the tuning record: {e}") from None
        if not isinstance(record, dict) or not {"task", "row", "space", "trials"} <= set(record):
            raise TableError(f"{path} is not a tuning record (it needs task, row, space and trials)")
        best = record.get("best")
        if not isinstance(record["task"], str) or not isinstance(record["row"], str) or \
                not isinstance(record["space"], dict) or not isinstance(record["trials"], list) or \
                not all(isinstance(t, dict) for t in record["trials"]) or \
                not (best is None or isinstance(best, dict) and isinstance(best.get("params", {}), dict)):
            raise TableError(f"{path} is not a tuning record: task and row are names, space an object, trials a "
                             f"list of objects, best an object or null")
        records.append(record)
    if not records:
        raise TableError(f"--tuning {folder}: no tuning records (*.json) there")
    return records


def _value(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def _params(params: dict[str, Any]) -> str:
    return ", ".join(f"`{k}={_value(v)}`" for k, v in params.items())


def to_markdown(records: list[dict[str, Any]], name: Callable[[str], str] = str) -> str:
    """tuning.md: one line per tuned (task, row); `name` turns a row's label into its table name."""
    first = records[0]
    objective = first.get("objective", "normalized_return")
    aim = "minimizing" if first.get("direction") == "minimize" else "maximizing"
    out = ["### Tuning", "",
           f"Before its seeds ran, every trained row was tuned on seed {first.get('seed', 0)}: the same number "
           f"of Optuna trials each (Hydra's Optuna sweeper, TPE sampler with seed 0), {aim} the final "
           f"evaluation's `{objective}`, over the row's learning rate and its one most sensitive key (the row's "
           "`tune:`), plus one more candidate, the row at its own values (the recipe's). The seeds ran at "
           "the best of these (the own values win ties).", "",
           f"| task | method | trials finished | search space | best values (the seeds' settings) | best {objective} |",
           "|:---|:---|---:|:---|:---|---:|"]
    notes = []
    for r in records:
        finished = sum(1 for t in r["trials"] if t.get("value") is not None)
        best = r.get("best")
        space = "; ".join(f"`{k}`: {md_escape(str(v))}" for k, v in r["space"].items())
        if best and best.get("own_values"):
            values = "its own values (the recipe's)"
        else:
            values = _params(best["params"]) if best else "– (the row's own values)"
        score = f"{best['value']:.3f}" if best and best.get("value") is not None else "–"
        out.append("| " + " | ".join([md_escape(r["task"]), md_escape(name(r["row"])),
                                      f"{finished}/{r.get('n_trials', len(r['trials']))}", space,
                                      md_escape(values), score]) + " |")
        if r.get("error"):
            notes.append(f"- {r['task']}/{r['row']}: {r['error']}")
    if notes:
        out += ["", "Rows without a tuned value:", "", *notes]
    return "\n".join(out) + "\n"


def write(records: list[dict[str, Any]], out: Path, name: Callable[[str], str] = str) -> Path:
    path = out / "tuning.md"
    path.write_text(to_markdown(records, name))
    return path
