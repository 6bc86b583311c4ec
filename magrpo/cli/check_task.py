"""magrpo-check-task NAME: does a registered task (a built-in one, or a plugin's) keep the contract of
`magrpo.tasks.base.Task`? The problems one per line and exit 1, or "ok" and exit 0; an unknown name
is one line, exit 2. The check itself is magrpo.tasks.check (`from magrpo import check_task`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from magrpo.core.plugins import load_plugins
from magrpo.core.schema import ConfigError
from magrpo.tasks.check import check_task


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="magrpo-check-task",
                                     description="Check that a registered task keeps the Task contract.")
    parser.add_argument("task", help="a registered task name (built-in or a plugin's)")
    parser.add_argument("--num-items", type=int, default=8, help="items per split the checks use (default 8)")
    parser.add_argument("--num-answers", type=int, default=16,
                        help="random joint answers scored per team size (default 16)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random answers (default 0)")
    args = parser.parse_args(argv)
    try:
        load_plugins()                  # a plugin's task: MAGRPO_PLUGINS or an installed entry point
        report = check_task(args.task, num_items=args.num_items, num_answers=args.num_answers, seed=args.seed)
    except (ConfigError, ValueError) as e:
        print(f"magrpo-check-task: error: {e}", file=sys.stderr)
        return 2
    for line in report.notes:
        print(f"note: {line}")
    print(report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
