"""The `magrpo-table` command: its options, the early checks of what the user named, and the
dispatch to a layout (generic.py, or paper.py with --layout paper)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from magrpo.core import trust
from magrpo.core.plugins import add_option, load_option
from magrpo.core.schema import ConfigError, SetupError
from magrpo.core.trust import one_command
from magrpo.core.writes import check_overwrite, publish
from magrpo.launch import check_out_dir
from magrpo.table import generic, paper, tuning, zsc
from magrpo.table.runs import PROG, Run, TableError, collect, warn

TABLE_FILES = ("table.md", "table.csv", "table.tex")     # always written; the curves depend on the runs


def _csv_list(text: str) -> list[str]:
    items = [part.strip() for part in text.split(",") if part.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list, got nothing")
    return items


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Tables (md, csv, tex) and learning curves from "
                                "magrpo-train run or multirun directories: one row per method, mean ± std over seeds.")
    p.add_argument("dirs", nargs="+", type=Path, metavar="DIR", help="run or multirun directories (searched recursively)")
    p.add_argument("--out", type=Path, default=None, help="output directory (default: DIR/table for a single DIR); "
                   "never inside a run or exported team")
    p.add_argument("--force", action="store_true", help="replace the files this command writes (table.md/.csv/.tex, "
                   "the curves, tuning.md) where --out already holds them; nothing else there is touched")
    p.add_argument("--group-by", type=_csv_list, default=None, metavar="KEY[,KEY]",
                   help="dotted config keys that define a method, e.g. algo.name,algo.joint_mode "
                        "(default: the algo plus the keys that differ between the runs)")
    p.add_argument("--metrics", type=_csv_list, default=None, metavar="A,B,C",
                   help="final-eval metrics to show, e.g. reward_mean,pass@1 (default: reward_mean, the reward "
                        "components and the task's metrics)")
    p.add_argument("--columns", type=_csv_list, default=None, metavar="A,B,C",
                   help="final-eval metrics to add after the layout's columns, e.g. lazy_agent_rate,answer_similarity,"
                        "agent_1/contribution (the collaboration diagnostics of eval.diagnostics=true); unlike "
                        "--metrics, a name no run reports is no error: its cells stay empty")
    p.add_argument("--include-unfinished", action="store_true",
                   help="include runs whose status is not 'finished' (their last evaluation stands in for the final one)")
    p.add_argument("--digits", type=int, default=3, help="decimals in table.md / table.tex (default 3)")
    p.add_argument("--smooth", type=int, default=1, metavar="N",
                   help="moving average over N logged points in the learning curves (default 1: none)")
    p.add_argument("--no-plots", action="store_true", help="write the tables only")
    p.add_argument("--layout", choices=["generic", "paper"], default="generic",
                   help="generic (default): every config difference is a method; paper: rows = the runs' "
                        "`label` (paper rows), columns = the task's paper metrics, best in bold; the coordination "
                        "table adds the AUC of the eval return over tokens (sample-matched), over update wall time "
                        "and over training FLOPs (compute-matched), and the aggregates over its games (IQM, mean, "
                        "optimality gap, P(MAGRPO > method) with stratified-bootstrap intervals, performance "
                        "profiles: aggregates.json, <family>_performance_profile.png; docs/paper.md)")
    p.add_argument("--tuning", type=Path, default=None, metavar="DIR",
                   help="the tuning records of magrpo-paper --tune-trials (DIR/*.json): written as tuning.md "
                        "next to the table; the tuning trials under DIR are not rows of the table")
    return p


def _shown_order(path: Path) -> tuple[int, str]:
    rank = {name: i for i, name in enumerate(TABLE_FILES)}
    return rank.get(path.name, len(TABLE_FILES) + (path.name == "tuning.md")), path.name


def check_names(runs: list[Run], metrics: Sequence[str] | None, group_by: Sequence[str] | None) -> list[str] | None:
    """Fail early, naming the bad name and what exists, on an unknown --metrics or --group-by entry."""
    if metrics:
        metrics = [m.removeprefix("eval/") for m in metrics]
        known = {k for r in runs for k in r.final}
        unknown = [m for m in metrics if m not in known]
        if unknown:
            raise TableError(f"unknown metric(s) {', '.join(unknown)}; the runs have: {', '.join(sorted(known))}")
    for key in group_by or []:
        if not any(r.lookup(key)[0] for r in runs):
            raise TableError(f"--group-by key {key!r} is in no run's config (use dotted keys of .hydra/config.yaml, "
                             "e.g. algo.joint_mode)")
    return list(metrics) if metrics is not None else None


@one_command
def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    add_option(parser)
    args = parser.parse_args(argv)
    trust.on_this_command(args.trust_plugins, "--trust-plugins", dirs=args.dirs)
    load_option(args, "magrpo-table", beside=[d for d in args.dirs if d.exists()])
    trust.allow_named([m.strip() for m in (args.plugins or "").split(",") if m.strip()])
    try:
        if args.out is None and len(args.dirs) > 1:
            raise TableError("several DIRs given: say where the tables go with --out")
        out = args.out if args.out is not None else args.dirs[0] / "table"
        records = tuning.read_records(args.tuning) if args.tuning is not None else []
        runs, skipped = collect(args.dirs, out, args.include_unfinished,
                                exclude=[args.tuning] if args.tuning is not None else [])
        # never into a run: one it reads, or any other (magrpo.core.writes)
        check_out_dir(out, [r.path for r in runs] + [p for p, _ in skipped],
                      note=" (the default for one DIR: DIR/table; give --out)" if args.out is None else "")
        metrics = check_names(runs, args.metrics, args.group_by)
        notes = []
        if args.include_unfinished and any(r.status != "finished" for r in runs):
            notes.append("Includes unfinished runs: their latest evaluation stands in for the final one.")
        if records:
            notes.append("Tuned: each trained row ran its seeds at the best values of its own tuning trials, the same "
                         "number for every row (tuning.md: the search spaces, the values, any row whose tuning found none).")
        check_overwrite(out, [*TABLE_FILES, *(["tuning.md"] if records else [])], args.force)
        common = dict(digits=args.digits, notes=notes, plots=not args.no_plots, smooth_window=args.smooth,
                      metrics=metrics, extra=[c.removeprefix("eval/") for c in args.columns or []])
        rc = 0

        if args.layout == "paper":      # magrpo-crossplay's results for the rows they cover (magrpo.table.zsc)
            crossplay, unused = zsc.collect(args.dirs, runs, skip=[out, *([args.tuning] if args.tuning else [])])
            for note in unused:
                warn(f"crossplay: {note}")
            notes += [f"Not in the table: {note}" for note in unused]
            notes += zsc.na_notes(crossplay)

        def fill(stage: Path) -> None:
            nonlocal rc
            if args.layout == "paper":
                rc = paper.write(runs, skipped, stage, zsc=crossplay, **common)
            else:
                rc = generic.write(runs, skipped, stage, group_by=args.group_by, **common)
            if records:
                tuning.write(records, stage, paper.row_name if args.layout == "paper" else str)

        # every file is written aside first, then moved in: a refusal or a failure leaves OUT as it was
        for path in sorted(publish(out, fill, args.force), key=_shown_order):
            print(f"wrote {path}")
        return rc
    except (TableError, ConfigError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except SetupError as e:         # a full disk (magrpo.core.writes.DiskFullError): OUT is as it was
        print(f"{PROG}: setup error: {e}", file=sys.stderr)
        return 1
