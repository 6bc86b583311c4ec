"""magrpo-export: a trained run as one team directory (magrpo.team.team), optionally pushed to the hub.

    magrpo-export outputs/train/<run> exports/my-team                 # the newest complete checkpoint
    magrpo-export outputs/train/<run> exports/my-team --step 60
    magrpo-export outputs/train/<run> exports/my-team --push-to-hub me/my-team

The directory's layout is in magrpo/team/team.py. It is written atomically (into a hidden temporary
directory next to OUT_DIR, renamed into place once its manifest is on disk), so an interrupted
export leaves no half team behind, and it holds everything loading needs: `Team.from_pretrained`
and `magrpo-eval team=` read it offline.

OUT_DIR is never inside a run directory or an exported team (a checkpoint path counts as its run;
magrpo.core.writes). A full disk stops the export with one line naming the directory and the space
free there (exit 1), and nothing is left at OUT_DIR.
"""

from __future__ import annotations

# isort: off
import magrpo.core.process  # noqa: F401  (first: the process defaults, before torch loads)
# isort: on

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from magrpo.core import records
from magrpo.core.checkpoint import is_team_dir
from magrpo.core.schema import ConfigError, SetupError
from magrpo.core.trust import one_command
from magrpo.launch import check_out_dir, parse_plain_cli
from magrpo.launch.run_config import inheritable, run_dir_of

log = logging.getLogger("magrpo")


def export_run(run: str | Path, out: str | Path, step: int | None = None, device: str | None = "cpu",
               force: bool = False) -> Path:
    """The team of `run` (newest complete checkpoint or `step`) written to `out`."""
    from magrpo.team.team import Team  # noqa: PLC0415  start-up: torch loads only where a model does; this command's --help and argument checks answer without it

    out = Path(out).expanduser()
    check_out_dir(out, [run], key="OUT_DIR", team=True)     # never into a run (a checkpoint path counts as its run)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        # --force replaces an earlier export, never anything else (a run, a checkpoint, a home directory)
        if not is_team_dir(out):
            raise ConfigError(f"OUT_DIR {str(out)!r} exists and holds something that is not an exported team; "
                              f"give a new or empty directory")
        if not force:
            raise ConfigError(f"OUT_DIR {str(out)!r} already holds an exported team; give a new directory, or "
                              f"--force to replace it")
    if Path(run).expanduser().resolve().is_relative_to(out.resolve()):
        raise ConfigError(f"OUT_DIR {str(out)!r} holds RUN_DIR {str(run)!r}; write the team elsewhere")
    team = Team.from_run(run, step=step, device=device, key="RUN_DIR")
    run_dir = run_dir_of(team.source["checkpoint"])
    overrides = inheritable("eval", run_dir) if run_dir is not None else None
    final_eval = None
    summary = Path(team.source["run_dir"] or "") / "summary.json"
    if team.source["run_dir"] and summary.is_file():
        try:
            data = records.load_json(summary)
            if isinstance(data, dict) and data.get("steps") == team.source["step"]:     # the weights exported
                final_eval = data.get("final_eval")
        except ConfigError as e:
            log.warning("%s; the model card shows no final evaluation", e)
    return team.save_pretrained(out, {"overrides": overrides, "final_eval": final_eval})


# -- the hub --------------------------------------------------------------------------------------


def push_to_hub(team_dir: str | Path, repo_id: str, private: bool = False, api: Any = None,
                commit_message: str = "Upload a magrpo team") -> str:
    """Upload an exported team directory to a hub model repo (created when missing); returns the
    repo's URL. `api`: an `huggingface_hub.HfApi` (or one with its create_repo/upload_folder)."""
    from magrpo.team.checks import read_team  # noqa: PLC0415  start-up: torch loads only where a model does; this command's --help and argument checks answer without it

    root = Path(team_dir)
    read_team(root)          # only a whole team goes up
    if api is None:
        from huggingface_hub import HfApi  # noqa: PLC0415  optional: the hub, only for --push-to-hub

        api = HfApi()
    url = api.create_repo(repo_id=repo_id, repo_type="model", private=private, exist_ok=True)
    api.upload_folder(folder_path=str(root), repo_id=repo_id, repo_type="model", commit_message=commit_message)
    return str(url)


# -- the command ------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="magrpo-export", description=(
        "Write a trained run's team as one directory: each agent's model or adapter (safetensors) and "
        "tokenizer, team.json (roles, topology, turns, feedback, assembly), a model card. Load it with "
        "`from magrpo import Team; Team.from_pretrained(OUT_DIR)`, evaluate it with `magrpo-eval team=OUT_DIR`."))
    p.add_argument("run_dir", metavar="RUN_DIR", help="a training run directory (or one of its checkpoints)")
    p.add_argument("out_dir", metavar="OUT_DIR", help="where the team is written (new or empty)")
    p.add_argument("--step", type=int, default=None, help="the checkpoint step (default: the newest complete one)")
    p.add_argument("--force", action="store_true", help="replace OUT_DIR if it holds an earlier exported team")
    p.add_argument("--push-to-hub", metavar="REPO_ID", default=None, help="also upload the team to this hub repo")
    p.add_argument("--private", action="store_true", help="with --push-to-hub: create the repo private")
    return p


@one_command
def main(argv: list[str] | None = None) -> int:
    args = parse_plain_cli(build_parser(), argv, dirs=lambda a: [a.run_dir])
    try:
        out = export_run(args.run_dir, args.out_dir, step=args.step, force=args.force)
        print(f"magrpo-export: wrote {out}")
    except ConfigError as e:
        print(f"magrpo-export: error: {e}", file=sys.stderr)
        return 2
    except SetupError as e:         # a full disk (magrpo.core.writes.DiskFullError): nothing was left at OUT_DIR
        print(f"magrpo-export: setup error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:  # a PluginInterrupt names the plugin it was importing
        print(f"magrpo-export: {e if str(e) else 'interrupted'}; nothing was written", file=sys.stderr)
        return 130
    if args.push_to_hub:
        try:
            url = push_to_hub(out, args.push_to_hub, private=args.private)
        except Exception as e:      # the team is written; only the upload failed
            print(f"magrpo-export: the team is in {out}, but the upload to {args.push_to_hub!r} failed: "
                  f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}", file=sys.stderr)
            return 1
        print(f"magrpo-export: pushed to {url}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
