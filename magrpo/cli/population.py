"""magrpo-population: train K self-play teams (one per seed) and write the population's manifest.

    magrpo-population --out pops/lever --size 5 task=lever algo=ippo
    magrpo-population --out pops/lever --size 5 --first-seed 10 --save-every 25 task=lever
    magrpo-train task=lever partners=[pops/lever]                        # Fictitious Co-Play on it
    magrpo-crossplay RUN_A RUN_B --partners pops/lever/seed_*            # held-out partners

Each member is `magrpo-train OVERRIDES seed=S` run in its own process into `--out/seed_S`; with
`--diversity LAM` each member after the first also gets `diversity=[its earlier members]
diversity_coef=LAM` (magrpo/algos/diversity.py: answers the earlier members find unlikely earn
more, so the members' conventions spread); with
`--save-every N` it keeps a checkpoint every N steps (FCP's earlier checkpoints: partners of
every skill level), else its final one. After each member the manifest `population.json` is
written again (members so far, their checkpoints, the overrides, the wall time), so a population
stopped part way is usable as far as it got; `complete` says whether every member finished. A
member that fails stops the command (exit 1) with its last log lines; the members before it stay.
Ctrl-C or a SIGTERM stops the member in training as it stops `magrpo-train` (a SIGTERM sent to this
command alone is passed on to it) and ends with one line: the signal, the members that finished and
the member's own last line, which holds its resume command; exit 130, or 143 for a SIGTERM.

`partners=[DIR]` (magrpo.team.partners) reads the manifest: every checkpoint it lists is a partner.
"""

from __future__ import annotations

# isort: off
import magrpo.core.process  # noqa: F401  (first: the process defaults, before torch loads)
# isort: on

import argparse
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from magrpo.core.checkpoint import POPULATION_FILE, step_dirs
from magrpo.core.overrides import override_key
from magrpo.core.schema import ConfigError
from magrpo.launch import Terminated, check_out_dir, stopped, term_as_interrupt

# Keys the command sets for each member itself.
OWN_KEYS = ("seed", "hydra.run.dir", "output_dir", "save_every", "resume", "diversity", "diversity_coef")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="magrpo-population", description=(
        "Train K self-play teams, one per seed, keep their checkpoints and write the population's manifest "
        "(population.json): partners for Fictitious Co-Play (partners=[DIR]) and held-out partners for "
        "magrpo-crossplay --partners."))
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="magrpo-train overrides every member shares "
                   "(task=..., algo=...); seed, hydra.run.dir, output_dir, save_every and resume are set per member")
    p.add_argument("--out", required=True, help="the population's directory (members in OUT/seed_S)")
    p.add_argument("--size", type=int, required=True, help="members K (seeds first-seed .. first-seed + K - 1)")
    p.add_argument("--first-seed", type=int, default=0, help="the first member's seed (default 0)")
    p.add_argument("--save-every", type=int, default=0,
                   help="keep a checkpoint every N steps of each member (FCP's earlier partners); 0 = the final one")
    p.add_argument("--diversity", type=float, default=0.0, metavar="LAM",
                   help="train each member after the first with the diversity term against the members before it "
                        "(diversity=[...] diversity_coef=LAM: a bonus of LAM nats-to-reward for answers they find "
                        "unlikely; magrpo/algos/diversity.py); 0 = off, the default")
    return p


def check_args(args: argparse.Namespace) -> None:
    if args.size < 1 or args.first_seed < 0 or args.save_every < 0:
        raise ConfigError(f"--size {args.size}, --first-seed {args.first_seed}, --save-every {args.save_every}: "
                          f"give a size >= 1 and a seed and a save interval >= 0")
    if not args.diversity >= 0 or args.diversity == float("inf"):
        raise ConfigError(f"--diversity {args.diversity}: give a weight >= 0 (0 = off)")
    for o in args.overrides:
        if "=" not in o or override_key(o) in OWN_KEYS:
            raise ConfigError(f"{o!r}: give magrpo-train overrides as KEY=VALUE, but not {', '.join(OWN_KEYS)} "
                              f"(set per member)")
    out = Path(args.out).expanduser()
    check_out_dir(out, [])
    if (out / POPULATION_FILE).exists():
        raise ConfigError(f"--out {out} already holds a population ({POPULATION_FILE}); give another directory")


def hydra_quoted(text: str) -> str:
    """`text` as one quoted string of Hydra's override grammar (inside a list: commas, brackets and
    spaces in a path stay part of it). The grammar reads a backslash as an escape only before a quote,
    so only those (and a run at the end, before the closing quote) are doubled."""
    doubled = re.sub(r"(\\+)(?='|$)", lambda m: m.group(1) * 2, text)
    return "'" + doubled.replace("'", "\\'") + "'"


def member_checkpoints(run: Path, root: Path) -> list[str]:
    return [str(d.relative_to(root)) for _, d in sorted(step_dirs(run / "checkpoints"))]


def write_manifest(root: Path, members: list[dict], args: argparse.Namespace, started: float, complete: bool) -> None:
    data = {"members": members, "overrides": list(args.overrides), "size": args.size,
            "first_seed": args.first_seed, "save_every": args.save_every, "diversity": args.diversity,
            "complete": complete,
            "wall_seconds": round(time.time() - started, 1)}
    tmp = root / f".{POPULATION_FILE}.tmp"
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(root / POPULATION_FILE)


class MemberStopped(KeyboardInterrupt):
    """Ctrl-C or a SIGTERM while a member trained: which member, how many finished before it, and
    the member's own last line (its resume command)."""

    def __init__(self, cause: BaseException, seed: int, finished: int, last_line: str) -> None:
        super().__init__(str(cause))
        self.how, self.code = stopped(cause)
        self.seed, self.finished, self.last_line = seed, finished, last_line


def stop_member(proc: subprocess.Popen, cause: BaseException, patience: float = 120.0) -> str:
    """Stop the member in training as its own command stops, and return its last line. Ctrl-C at a
    terminal reaches it too; a SIGTERM sent to this command alone is passed on. A member still
    running after `patience` seconds is killed."""
    if isinstance(cause, Terminated) and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=patience)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    lines = [ln for ln in (err or "").strip().splitlines() if ln.startswith("magrpo-train:")]
    return lines[-1].removeprefix("magrpo-train: ") if lines else f"it ended with exit {proc.returncode}"


def population(args: argparse.Namespace) -> dict:
    """Train the members and write the manifest (module docstring); returns the manifest."""
    check_args(args)
    root = Path(args.out).expanduser()
    root.mkdir(parents=True, exist_ok=True)
    started = time.time()
    members: list[dict] = []
    for k in range(args.size):
        seed = args.first_seed + k
        run = root / f"seed_{seed}"
        cmd = [sys.executable, "-m", "magrpo.cli.train", *args.overrides, f"seed={seed}", f"hydra.run.dir={run}",
               f"save_every={args.save_every}"]
        if args.diversity > 0 and members:     # against the members before it: their final checkpoints
            earlier = ",".join(hydra_quoted(str(root / m["run"])) for m in members)
            cmd += [f"diversity=[{earlier}]", f"diversity_coef={args.diversity}"]
        t0 = time.time()
        print(f"magrpo-population: member {k + 1}/{args.size} (seed {seed}) -> {run}", file=sys.stderr, flush=True)
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            _, err = proc.communicate()
        except KeyboardInterrupt as e:
            write_manifest(root, members, args, started, complete=False)
            raise MemberStopped(e, seed, len(members), stop_member(proc, e)) from None
        if proc.returncode != 0:
            tail = "\n".join(err.strip().splitlines()[-5:])
            write_manifest(root, members, args, started, complete=False)
            raise RuntimeError(f"member seed {seed} failed (exit {proc.returncode}); the {len(members)} member(s) "
                               f"before it are in {root / POPULATION_FILE}:\n{tail}")
        summary = json.loads((run / "summary.json").read_text())
        final = summary.get("final_eval") or {}
        metric = (summary.get("best") or {}).get("metric") or "reward_mean"     # the task's primary metric
        members.append({"seed": seed, "run": str(run.relative_to(root)), "checkpoints": member_checkpoints(run, root),
                        "final": {metric: final.get(metric)}, "wall_seconds": round(time.time() - t0, 1)})
        write_manifest(root, members, args, started, complete=k + 1 == args.size)
        shown = final.get(metric)
        print(f"magrpo-population: seed {seed} finished in {time.time() - t0:.0f} s; {metric} "
              f"{'n/a' if shown is None else f'{shown:.3f}'}", file=sys.stderr, flush=True)
    return json.loads((root / POPULATION_FILE).read_text())


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with term_as_interrupt():
            manifest = population(args)
    except ConfigError as e:
        print(f"magrpo-population: error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"magrpo-population: {e}", file=sys.stderr)
        return 1
    except MemberStopped as e:
        print(f"magrpo-population: {e.how} while member seed {e.seed} trained; {args.out}/{POPULATION_FILE} lists "
              f"the {e.finished} member(s) that finished; the member says: {e.last_line}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt as e:
        how, code = stopped(e)
        print(f"magrpo-population: {how}; {args.out}/{POPULATION_FILE} lists the members that finished",
              file=sys.stderr)
        return code
    n = sum(len(m["checkpoints"]) for m in manifest["members"])
    print(f"magrpo-population: wrote {args.out}/{POPULATION_FILE}: {len(manifest['members'])} member(s), {n} "
          f"checkpoint(s), {manifest['wall_seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
