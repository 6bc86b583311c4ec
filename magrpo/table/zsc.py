"""Zero-shot coordination columns of `magrpo-table --layout paper`: what `magrpo-crossplay` found
for a row's seeds (docs/zsc.md).

A `crossplay.json` anywhere under the table's DIRs joins the table when every one of its sources is
a run the table holds, all of one task and one row (method): that row then gets

    self-play          the mean over the sources of each team playing with itself
    cross-play         the mean over pairings of agents from different sources (independent seeds)
    ZSC gap            self-play - cross-play (lower: conventions that transfer)
    held-out partner   each team with one slot filled by a partner none of them trained with
                       (only where magrpo-crossplay was given --partners)

each with the 95% confidence interval over the sources that magrpo-crossplay computed. The file is
data: its recorded source paths are compared with the runs the table loaded and nothing else is
read or run; a file that is not one crossplay.json of one row is named under the table, not used.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from magrpo.core import records
from magrpo.core.schema import ConfigError
from magrpo.table.runs import Run, walk
from magrpo.table.stats import Cell

FILE = "crossplay.json"
MAX_BYTES = 64 << 20           # a crossplay.json of thousands of pairings is a few MB

# (column key, header, the crossplay.json key, higher is better)
FIELDS = (("zsc/self_play", "self-play", "self_play", True),
          ("zsc/cross_play", "cross-play", "cross_play", True),
          ("zsc/gap", "ZSC gap (self - cross)", "gap", False),
          ("zsc/held_out", "held-out partner", "held_out", True))
NOTE = ("self-play, cross-play, ZSC gap and held-out partner: magrpo-crossplay over the row's seeds (its "
        "crossplay.json under the table's directories): each seed's team with itself, agents of different "
        "seeds paired, their difference, and (where it was given --partners) each team with one slot filled "
        "by a partner none of them trained with; ± is the 95% interval over the seeds (± n/a where it cannot be "
        "estimated, for the reason listed under the table).")


@dataclass(frozen=True)
class Result:
    path: Path                  # the crossplay.json
    values: dict[str, Cell]     # column key -> mean ± 95% CI over the sources


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _candidates(here: Path, recorded: str, relative: str | None) -> list[str]:
    """Where a recorded source may be now: beside the file (the path relative to it, which survives
    moving the whole sweep), as recorded (absolute, or relative to this directory)."""
    out = []
    for place in ([here / relative] if isinstance(relative, str) else []) + [recorded]:
        try:
            out.append(os.path.realpath(place))
        except (ValueError, OSError):       # a NUL byte, a loop: no place of any run
            continue
    return out


def read(path: Path, runs_by_path: dict[str, Run]) -> tuple[tuple[str, str] | None, Result | None, str | None]:
    """(task, row label), its Result, or a note saying why the file is not used."""
    try:
        data = records.load_json(path, MAX_BYTES)
    except ConfigError as e:
        return None, None, f"`{path}`: not used ({e})"
    sources = data.get("sources") if isinstance(data, dict) else None
    if not isinstance(sources, list) or not sources or not all(isinstance(s, str) for s in sources):
        return None, None, f"`{path}`: no list of sources, not a {FILE} of magrpo-crossplay; not used"
    relative = data.get("source_dirs")
    relative = relative if isinstance(relative, list) and len(relative) == len(sources) else [None] * len(sources)
    found = []
    for src, rel in zip(sources, relative):
        run = next((runs_by_path[p] for p in _candidates(path.parent, src, rel) if p in runs_by_path), None)
        if run is None:
            return None, None, f"`{path}`: its source `{src}` is not a run of this table; not used"
        found.append(run)
    rows = {(r.task, r.label) for r in found}
    if len(rows) != 1:
        names = ", ".join(sorted(f"{t}/{lab}" for t, lab in rows))
        return None, None, f"`{path}`: its sources are runs of several rows ({names}); not used"
    values = {}
    for key, _, field, _ in FIELDS:
        mean = _number(data.get(field))
        if mean is not None:
            ci = _number(data.get(f"{field}_ci95"))
            na = data.get(f"{field}_ci95_na")
            na = (na if isinstance(na, str) and na else "no interval recorded") if ci is None and field != "gap" else None
            values[key] = Cell(mean, None, len(sources), ci, na)
    if "zsc/self_play" not in values:
        return None, None, f"`{path}`: no self-play score; not used"
    return rows.pop(), Result(path, values), None


def na_notes(results: dict[tuple[str, str], Result]) -> list[str]:
    """One line per score shown `± n/a`: where, and why magrpo-crossplay could not estimate its interval."""
    headers = {key: header for key, header, _, _ in FIELDS}
    return [f"{task}/{row}, {headers[key]}: ± n/a ({cell.na})" for (task, row), res in sorted(results.items())
            for key, cell in res.values.items() if cell.na is not None]


def collect(dirs: Iterable[Path], runs: Sequence[Run],
            skip: Iterable[Path] = ()) -> tuple[dict[tuple[str, str], Result], list[str]]:
    """Every usable crossplay.json under `dirs` by (task, row label), and notes on those not used
    (one per file; where two cover one row, the one over more seeds, then the first found)."""
    by_path = {os.path.realpath(r.path): r for r in runs}
    results: dict[tuple[str, str], Result] = {}
    notes = []
    skip = list(skip)
    for top in dirs:
        for root, _, files in walk(top, skip):
            if FILE not in files:
                continue
            row, result, note = read(Path(root) / FILE, by_path)
            if row is None or result is None:        # not used: `read` says why
                notes.append(note or f"`{Path(root) / FILE}`: not used")
                continue
            old = results.get(row)
            if old is not None:
                keep, drop = (result, old) if result.values["zsc/self_play"].count > \
                    old.values["zsc/self_play"].count else (old, result)
                notes.append(f"`{drop.path}`: another {FILE} covers {row[0]}/{row[1]} ({keep.path}); not used")
                result = keep
            results[row] = result
    return results, notes
