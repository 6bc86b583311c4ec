"""An exported team's directory, written: each policy's weights (or adapter) and tokenizer, a LoRA
team's base model once, team.json (what makes the agents a team), the model card (README.md), the
run's saved overrides, the manifest, and your signature over it (magrpo.core.trust), all renamed
into place at once (magrpo.core.checkpoint.write_checkpoint). The layout is docs/team.md's.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
import yaml

from magrpo import __version__
from magrpo.algos import ALGOS
from magrpo.config.schemas import ModelSchema
from magrpo.core import checkpoint, trust
from magrpo.core.checkpoint import OVERRIDES_FILE, TEAM_FILE
from magrpo.core.instances import as_data
from magrpo.models import hub
from magrpo.models.agents import (
    _load_model,
    _load_tokenizer,
    _loading,
    policy_agents,
    resolve_model_path,
    save_agent,
)

log = logging.getLogger(__name__)

FORMAT = 1
# The nodes of a run's config a team carries: what shapes the team and how it is scored.
TEAM_NODES = ("task", "reward", "algo", "agents", "feedback", "sandbox", "eval", "plugins")


# -- writing a team (the directory magrpo-export writes) ---------------------------------------------------------------------------------


def _base_key(spec: ModelSchema) -> tuple:
    return (spec.name_or_path, spec.revision, spec.dtype)


def _layout(team: Any) -> tuple[list[dict], dict[tuple, str]]:
    """Per policy, where its weights go and what loading reads (`models` of team.json), and the
    base directory of every distinct base model a LoRA adapter rides on."""
    cfg = team.config.agents
    specs = list(cfg.models)
    shared_base = cfg.share_base
    entries: list[dict] = []
    bases: dict[tuple, str] = {}
    for policy in policy_agents(team.agents):
        i = policy.index
        spec_index = i if len(specs) > 1 else 0
        spec = specs[spec_index]
        adapter = shared_base or spec.lora is not None
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


def _write_base(spec: ModelSchema, out: Path) -> None:
    """A LoRA team's base model as it was loaded for training (from its original source)."""
    with _loading(spec, 0):
        path = resolve_model_path(spec.name_or_path)
        model = _load_model(spec, path, torch.device("cpu"))
        tok = _load_tokenizer(spec, path)
    with hub.quiet_bars("transformers"):
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
        "feedback": as_data(cfg.feedback),
        "assembly": team.task.assembly,
        "roles": roles, "example_item": item_id,
        "weights": "adapters" if any(e["adapter"] for e in entries) else "full",
        "models": entries,
        "sampling": {k: getattr(team.sampling(), k) for k in ("max_new_tokens", "do_sample", "temperature", "top_p",
                                                                  "top_k", "max_prompt_length")},
        "overrides": overrides,
        "final_eval": final_eval,
        "source": team.source,
        "config": as_data(cfg),
        "plugins": list(cfg.plugins),      # imported again by whoever loads the team
    }


# Fewer eval items than this, and the card says its scores are too few to read as the team's.
CARD_MIN_ITEMS = 16


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
        n = final.get("num_items")
        if isinstance(n, (int, float)) and n > 0:
            lines += [f"On {int(n)} item(s) of the task's eval split" + (
                f": too few to read as the team's score (a smoke-sized evaluation); `magrpo-eval team={where}` "
                f"evaluates it on the whole split." if n < CARD_MIN_ITEMS else "."), ""]
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
    """Write `team` to `out` atomically (magrpo.core.checkpoint.write_checkpoint with no config.json)."""
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
            (tmp / OVERRIDES_FILE).write_text(yaml.safe_dump(list(overrides), default_flow_style=False))

    def seal(tmp: Path) -> None:        # made by you, here: you load it again without trusting it
        trust.sign_team(tmp, out, info, team.allowed, reach=team.own)

    step = team.source.get("step") or 0
    checkpoint.write_checkpoint(out, fill, int(step), None, seal=seal)
    log.info("wrote the team to %s", out)
    return out
