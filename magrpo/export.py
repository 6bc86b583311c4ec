"""magrpo-export: a trained run as one team directory (magrpo.team), optionally pushed to the hub.

    magrpo-export outputs/train/<run> exports/my-team                 # the newest complete checkpoint
    magrpo-export outputs/train/<run> exports/my-team --step 60
    magrpo-export outputs/train/<run> exports/my-team --push-to-hub me/my-team

The directory's layout is in magrpo/team.py. It is written atomically (into a hidden temporary
directory next to OUT_DIR, renamed into place once its manifest is on disk), so an interrupted
export leaves no half team behind, and it holds everything loading needs: `Team.from_pretrained`
and `magrpo-eval team=` read it offline.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from magrpo.schema import ConfigError

log = logging.getLogger("magrpo")


# -- writing a team ---------------------------------------------------------------------------------


def _base_key(spec: Any) -> tuple:
    return (spec.name_or_path, spec.get("revision"), spec.get("dtype"))


def _layout(team: Any) -> tuple[list[dict], dict[tuple, str]]:
    """Per policy, where its weights go and what loading reads (`models` of team.json), and the
    base directory of every distinct base model a LoRA adapter rides on."""
    from magrpo.models import policy_agents

    cfg = team.config.agents
    specs = list(cfg.models)
    shared_base = bool(cfg.get("share_base"))
    entries, bases = [], {}
    for policy in policy_agents(team.agents):
        i = policy.index
        spec_index = i if len(specs) > 1 else 0
        spec = specs[spec_index]
        adapter = shared_base or spec.get("lora") is not None
        if adapter:
            key = _base_key(specs[0] if shared_base else spec)
            bases.setdefault(key, "")
            entries.append({"policy": policy.policy_name, "spec": spec_index, "adapter": True, "base_key": key})
        else:
            entries.append({"policy": policy.policy_name, "spec": spec_index, "adapter": False,
                            "load": policy.policy_name, "tokenizer": policy.policy_name})
    names = {key: "base" if len(bases) == 1 else f"base_{n + 1}" for n, key in enumerate(bases)}
    for e in entries:
        if e["adapter"]:
            e["load"] = e["tokenizer"] = names[e.pop("base_key")]
    return entries, names


def _write_base(spec: Any, out: Path) -> None:
    """A LoRA team's base model as it was loaded for training (from its original source)."""
    import torch

    from magrpo.models import _load_model, _load_tokenizer, _loading, resolve_model_path

    with _loading(spec, 0):
        path = resolve_model_path(spec.name_or_path)
        model = _load_model(spec, path, torch.device("cpu"))
        tok = _load_tokenizer(spec, path)
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    del model


def _example_prompts(team: Any) -> tuple[str | None, list[str] | None]:
    """Each agent's first-turn prompt for the task's first eval item (team.json shows the roles)."""
    try:
        items = team.task.load("eval")
    except Exception as e:     # the data may live elsewhere now; the team is whole without the example
        log.warning("no example prompts in team.json: the task's eval split could not be loaded (%s)", e)
        return None, None
    if not items:
        return None, None
    return str(items[0].get("id")), team.task.prompts(items[0], team.num_agents)


def team_record(team: Any, entries: list[dict], overrides: list[str] | None,
                final_eval: dict | None) -> dict[str, Any]:
    """team.json's content."""
    from magrpo import __version__
    from magrpo.algos import ALGOS

    cfg = team.config
    spec = ALGOS[cfg.algo.name].team(cfg)
    item_id, prompts = _example_prompts(team)
    by_policy = {e["policy"]: e for e in entries}
    roles = [{"agent": a.name, "policy": a.policy_name, "model": cfg.agents.models[by_policy[a.policy_name]["spec"]].name_or_path,
              "sampling": dict(a.sampling), "example_prompt": prompts[a.index] if prompts else None}
             for a in team.agents]
    turns = team.turns
    return {
        "format": 1, "library": "magrpo", "version": __version__,
        "task": cfg.task.name, "num_agents": team.num_agents, "form": spec.form, "level": team.level,
        "algorithm": cfg.algo.name, "topology": turns.topology,
        "turns": {"num_turns": turns.num_turns, "discount": turns.discount, "early_termination_threshold":
                  turns.threshold},
        "feedback": OmegaConf.to_container(cfg.feedback, resolve=True) if cfg.get("feedback") else {"mode": "none"},
        "assembly": team.task.assembly,
        "roles": roles, "example_item": item_id,
        "weights": "adapters" if any(e["adapter"] for e in entries) else "full",
        "models": entries,
        "sampling": {k: getattr(team.sampling(), k) for k in ("max_new_tokens", "do_sample", "temperature", "top_p",
                                                                  "top_k", "max_prompt_length")},
        "overrides": overrides,
        "final_eval": final_eval,
        "source": team.source,
        "config": OmegaConf.to_container(cfg, resolve=True),
    }


def model_card(info: dict[str, Any], repo_id: str | None = None) -> str:
    """README.md of an exported team: what it is, how it was trained, how it scored, how to load it."""
    models = sorted({r["model"] for r in info["roles"]})
    hub_models = [m for m in models if not m.startswith("builtin:") and not Path(m).is_absolute()]
    front = ["---", "library_name: magrpo", "tags:", "- magrpo", "- multi-agent", "- reinforcement-learning",
             f"- {info['task']}"]
    if hub_models:
        front += ["base_model:"] + [f"- {m}" for m in hub_models]
    front.append("---")
    where = repo_id or "PATH/TO/THIS/DIRECTORY"
    lines = [*front, "", f"# A {info['num_agents']}-agent team for `{info['task']}`, trained with `{info['algorithm']}`",
             "", "Exported by magrpo-export. The team's agents, roles, topology, turns, feedback and sampling are in "
             "`team.json`.", "", "| agent | policy | model |", "|---|---|---|"]
    lines += [f"| {r['agent']} | {r['policy']} | `{r['model']}` |" for r in info["roles"]]
    t = info["turns"]
    lines += ["", f"- topology: {info['topology']}; turns: {t['num_turns']}; feedback: "
              f"{info['feedback'].get('mode', 'none')}; team level: {info['level']}",
              f"- joint answer: {info['assembly']}",
              f"- trained from: {info['source'].get('run_dir') or info['source'].get('checkpoint')} "
              f"(step {info['source'].get('step')})", "", "## Training config", ""]
    lines += (["```", *info["overrides"], "```"] if info["overrides"] else
              ["The run's resolved config is under `config` in team.json."])
    lines += ["", "## Final evaluation", ""]
    final = info.get("final_eval") or {}
    # the answers' metrics; not the timings and counts of the machine that evaluated them
    shown = {k: v for k, v in final.items() if isinstance(v, (int, float)) and "/" not in k
             and not k.endswith("_s") and k not in ("num_items", "output_tokens_mean")}
    if shown:
        lines += ["| metric | value |", "|---|---|"] + [f"| {k} | {v:.4f} |" for k, v in shown.items()]
    else:
        lines.append("The run recorded no final evaluation (summary.json).")
    lines += ["", "## Using it", "", "```python", "from magrpo import Team", "",
              f"team = Team.from_pretrained({where!r})", "items = team.task.load('eval')",
              "out = team.answer(items[0])          # out.answer: the joint answer; out.parts: each agent's",
              "texts = team.generate(['prompt for agent 1', 'prompt for agent 2'][:team.num_agents])", "```", "",
              "```bash", f"magrpo-eval team={where}", "```", ""]
    return "\n".join(lines)


def write_team(team: Any, out: Path, card_extra: dict[str, Any]) -> Path:
    """Write `team` to `out` atomically (magrpo.checkpoint.write_checkpoint with no config.json)."""
    from magrpo import checkpoint
    from magrpo.models import policy_agents, save_agent
    from magrpo.team import OVERRIDES_FILE, TEAM_FILE

    entries, bases = _layout(team)
    specs = list(team.config.agents.models)
    overrides, final_eval = card_extra.get("overrides"), card_extra.get("final_eval")
    info = team_record(team, entries, overrides, final_eval)

    def fill(tmp: Path) -> None:
        for policy in policy_agents(team.agents):
            save_agent(policy, tmp / policy.policy_name)
            nested = tmp / policy.policy_name / str(policy.adapter)
            if policy.adapter and (nested / "adapter_config.json").is_file():
                for f in nested.iterdir():      # PEFT writes a named adapter one level down
                    f.rename(tmp / policy.policy_name / f.name)
                nested.rmdir()
        loaded = list(team.loaded_from.models)
        for key, name in bases.items():
            k = next(i for i, s in enumerate(specs) if _base_key(s) == key)
            _write_base(loaded[k if k < len(loaded) else 0], tmp / name)     # a re-export reads its own base/
        (tmp / TEAM_FILE).write_text(json.dumps(info, indent=2, default=str) + "\n")
        (tmp / "README.md").write_text(model_card(info, card_extra.get("repo_id")))
        if overrides is not None:
            import yaml

            (tmp / OVERRIDES_FILE).write_text(yaml.safe_dump(list(overrides), default_flow_style=False))

    step = team.source.get("step") or 0
    checkpoint.write_checkpoint(out, fill, int(step), None)
    log.info("wrote the team to %s", out)
    return out


def export_run(run: str | Path, out: str | Path, step: int | None = None, device: str | None = "cpu",
               force: bool = False) -> Path:
    """The team of `run` (newest complete checkpoint or `step`) written to `out`."""
    from magrpo.run_config import inheritable, run_dir_of
    from magrpo.team import Team, is_team_dir

    out = Path(out).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        # --force replaces an earlier export, never anything else (a run, a checkpoint, a home directory)
        if not is_team_dir(out):
            raise ConfigError(f"OUT_DIR {str(out)!r} exists and holds something that is not an exported team; "
                              f"give a new or empty directory")
        if not force:
            raise ConfigError(f"OUT_DIR {str(out)!r} already holds an exported team; give a new directory, or "
                              f"--force to replace it")
    src = Path(run).expanduser().resolve()
    if out.resolve().is_relative_to(src) or src.is_relative_to(out.resolve()):
        raise ConfigError(f"OUT_DIR {str(out)!r} is inside RUN_DIR {str(run)!r} (or holds it); write the team elsewhere")
    team = Team.from_run(run, step=step, device=device, key="RUN_DIR")
    run_dir = run_dir_of(team.source["checkpoint"])
    overrides = inheritable("eval", run_dir) if run_dir is not None else None
    final_eval = None
    summary = Path(team.source["run_dir"] or "") / "summary.json"
    if team.source["run_dir"] and summary.is_file():
        try:
            data = json.loads(summary.read_text())
            if data.get("steps") == team.source["step"]:     # the metrics of the weights exported
                final_eval = data.get("final_eval")
        except ValueError:
            log.warning("%s is not readable JSON; the model card shows no final evaluation", summary)
    return team.save_pretrained(out, {"overrides": overrides, "final_eval": final_eval})


# -- the hub --------------------------------------------------------------------------------------


def push_to_hub(team_dir: str | Path, repo_id: str, private: bool = False, api: Any = None,
                commit_message: str = "Upload a magrpo team") -> str:
    """Upload an exported team directory to a hub model repo (created when missing); returns the
    repo's URL. `api`: an `huggingface_hub.HfApi` (or one with its create_repo/upload_folder)."""
    from magrpo.team import read_team

    root = Path(team_dir)
    read_team(root)          # only a whole team goes up
    if api is None:
        from huggingface_hub import HfApi

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


def main(argv: list[str] | None = None) -> int:
    from magrpo.launch import parse_plain_cli

    args = parse_plain_cli(build_parser(), argv)
    try:
        out = export_run(args.run_dir, args.out_dir, step=args.step, force=args.force)
        print(f"magrpo-export: wrote {out}")
    except ConfigError as e:
        print(f"magrpo-export: error: {e}", file=sys.stderr)
        return 2
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
