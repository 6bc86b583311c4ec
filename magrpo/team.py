"""A trained team as one object and one directory: `from magrpo import Team`.

    team = Team.from_pretrained("exports/tldr-team")     # a directory written by magrpo-export, or a hub id
    out = team.answer(item)                              # out.answer (the joint answer), out.parts (per agent)
    outs = team.answer_batch(items)
    texts = team.generate(["prompt for agent 1", "prompt for agent 2"])   # one answer per agent

A team is its agents (models, tokenizers, per-agent sampling) plus what makes them a team: the task
that writes each agent's prompt and assembles the joint answer, the topology (simultaneous or a
sequential chain), the turns and the feedback between them. `Team.from_run(RUN)` builds it from a
training run's newest complete checkpoint (or `step=`), `save_pretrained(DIR)` writes it as one
directory (the format `magrpo-export` writes, README "Exporting and using a trained team"):

    team.json            agents and roles, topology, turns, feedback, sampling, how the joint answer
                         is assembled, the task's and models' config, where it came from
    README.md            a model card: task, algorithm, training config, final eval metrics, loading
    overrides.yaml       the training run's overrides that shape the team (`magrpo-eval team=DIR`
                         takes them up as `checkpoint=` does)
    agent_<k>/ | policy/ each policy's weights (or LoRA adapter) and tokenizer, `save_pretrained` format
    base/ (base_<k>/)    a LoRA team's base model, written once however many adapters ride on it
    manifest.json        size and sha256 of every file, written last (an interrupted export is no team)

Nothing here needs Hydra: the config is plain data (OmegaConf), loading works offline from the
directory, and a hub id is fetched once with `huggingface_hub.snapshot_download`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from magrpo.schema import ConfigError

log = logging.getLogger(__name__)

TEAM_FILE = "team.json"
OVERRIDES_FILE = "overrides.yaml"
FORMAT = 1
# The nodes of a run's config a team carries: what shapes the team and how it is scored.
TEAM_NODES = ("task", "reward", "algo", "agents", "feedback", "sandbox", "eval")


@dataclass
class TeamAnswer:
    """One joint answer: `answer` assembled by the task from `parts` (one per agent, after the
    last turn); `turns[t]` the parts after turn t + 1; `reward` the task's reward of the joint
    answer, when it was scored."""

    answer: str
    parts: list[str]
    turns: list[list[str]] = field(default_factory=list)
    reward: float | None = None


def is_team_dir(path: str | Path) -> bool:
    return (Path(str(path)).expanduser() / TEAM_FILE).is_file()


def default_hardware(device: str | None = None) -> DictConfig:
    """A `hardware` node for loading outside a training run: one device for every agent."""
    return OmegaConf.create({"device": device or "auto", "agent_devices": None, "autocast": "none",
                             "gradient_checkpointing": False, "num_threads": None})


class Team:
    """Agents with the task, topology, turns and feedback they were trained with (module docstring)."""

    def __init__(self, config: DictConfig, agents: list, source: dict[str, Any] | None = None,
                 info: dict[str, Any] | None = None, loaded_from: DictConfig | None = None):
        from magrpo.feedback import build_feedback
        from magrpo.tasks import build_task
        from magrpo.turns import TurnSpec

        self.config = config
        self.agents = agents
        self.source = source or {}
        self.info = info or {}          # team.json of a loaded team ({} for one built from a run)
        # The `agents` node the models were loaded with: the run's own (config.agents, which keeps
        # the models the team was trained from), or an exported team's with its directories' paths.
        self.loaded_from = loaded_from if loaded_from is not None else config.agents
        self.task = build_task(config.task, config.reward, config.get("sandbox"))
        self.turns = TurnSpec.from_algo(config.algo)
        self.feedback = build_feedback(config.get("feedback"), self.task)

    # -- building ---------------------------------------------------------------------------------

    @classmethod
    def from_run(cls, path: str | Path, step: int | None = None, device: str | None = None,
                 hardware: Any = None, key: str = "run") -> Team:
        """The team of a training run (its newest complete checkpoint, or `checkpoints/step_<step>`),
        or of one checkpoint directory, with the trained weights loaded."""
        from magrpo import checkpoint

        ckpt = checkpoint_of(path, step, key)
        config = OmegaConf.create(checkpoint.stored_config(ckpt))
        team_cfg = OmegaConf.masked_copy(config, [k for k in TEAM_NODES if k in config])
        agents = load_team_agents(team_cfg, hardware or default_hardware(device), ckpt)
        run = ckpt.parent.parent if ckpt.parent.name == "checkpoints" else None
        return cls(team_cfg, agents, source={"run_dir": str(run) if run else None, "checkpoint": str(ckpt),
                                             "step": checkpoint.checkpoint_step(ckpt)})

    @classmethod
    def from_pretrained(cls, path_or_repo: str | Path, device: str | None = None, hardware: Any = None,
                        revision: str | None = None) -> Team:
        """A team exported by `magrpo-export` (`save_pretrained`): a local directory, or a hub repo id
        (downloaded once; offline, its cached copy)."""
        root = local_team(path_or_repo, revision)
        info = read_team(root)
        config = OmegaConf.create(info["config"])
        agents_cfg = _agents_at(config.agents, info, root)
        hw = hardware or default_hardware(device)
        from magrpo.models import load_agent_weights, load_agents, policy_agents

        agents = load_agents(agents_cfg, hw, info["num_agents"], need_reference=False)
        if info["weights"] == "adapters":
            for policy in policy_agents(agents):
                load_agent_weights(policy, root / policy.policy_name)
        return cls(config, agents, source={**info.get("source", {}), "team_dir": str(root)}, info=info,
                   loaded_from=agents_cfg)

    # -- shape ------------------------------------------------------------------------------------

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def level(self) -> str:
        from magrpo.models import team_level

        return team_level(self.config.agents)

    def sampling(self, num_samples: int = 1, do_sample: bool | None = None, temperature: float | None = None):
        """How the team samples: the training run's decoding keys, `do_sample` and `temperature`
        from its eval settings unless given."""
        from magrpo.rollout import Sampling

        algo, ev = self.config.algo, self.config.get("eval") or {}
        return Sampling(num_generations=num_samples, max_new_tokens=algo.max_new_tokens,
                        do_sample=ev.get("do_sample", True) if do_sample is None else do_sample,
                        temperature=(ev.get("temperature") or algo.temperature) if temperature is None else temperature,
                        top_p=algo.top_p, top_k=algo.top_k, max_prompt_length=algo.max_prompt_length,
                        share_prompt=algo.get("share_prompt", True))

    # -- using ------------------------------------------------------------------------------------

    def answer(self, item: dict, **kwargs: Any) -> TeamAnswer:
        return self.answer_batch([item], **kwargs)[0]

    @torch.no_grad()
    def answer_batch(self, items: list[dict], do_sample: bool | None = None, temperature: float | None = None,
                     seed: int = 0, batch_size: int = 16) -> list[TeamAnswer]:
        """Run the team on task items (dicts as the task's data has them, e.g. `team.task.load("eval")`)
        with its trained topology and turns; one TeamAnswer per item. Every turn is scored (the
        reward decides early stops and the feedback), so items need the fields the reward reads."""
        from magrpo.eval_loop import collect_answers

        if not items:
            return []
        for k, it in enumerate(items):
            if not isinstance(it, dict):
                raise TypeError(f"items[{k}] is a {type(it).__name__}; give task items as dicts "
                                f"(e.g. team.task.load('eval'))")
        items = [{"id": it.get("id", f"item_{k}"), **it} for k, it in enumerate(items)]
        ans = collect_answers(self.agents, self.task, items, self.sampling(1, do_sample, temperature),
                              batch_size, seed=seed, scheme="team", turns=self.turns, feedback=self.feedback)
        per_turn = [turn[2] for turn in ans.per_turn]
        _, _, final, scores = ans.final
        return [TeamAnswer(self.task.assemble(it, parts), list(parts), [list(t[k]) for t in per_turn],
                           float(scores[k])) for k, (it, parts) in enumerate(zip(items, final))]

    @torch.no_grad()
    def generate(self, prompts: list[str] | list[list[str]], do_sample: bool | None = None,
                 temperature: float | None = None, seed: int = 0) -> list[str] | list[list[str]]:
        """Raw prompts, no task: one prompt per agent in, one answer per agent out; a list of such
        lists gives a list of answers lists."""
        from magrpo.rollout import generate

        if not prompts:
            return []
        batch = [prompts] if isinstance(prompts[0], str) else prompts
        for k, row in enumerate(batch):
            if isinstance(row, str) or len(row) != self.num_agents:
                raise ValueError(f"prompts[{k}]: give one prompt per agent ({self.num_agents} strings), "
                                 f"got {row!r:.80}")
        sampling = self.sampling(1, do_sample, temperature)
        devices = [a.device for a in self.agents if a.device.type == "cuda"]
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            columns = [generate(agent, [row[i] for row in batch], sampling).texts
                       for i, agent in enumerate(self.agents)]
        out = [list(answers) for answers in zip(*columns)]
        return out[0] if batch is not prompts else out

    # -- saving -----------------------------------------------------------------------------------

    def save_pretrained(self, out: str | Path, card_extra: dict[str, Any] | None = None) -> Path:
        """Write the team as one directory (module docstring), atomically: an interrupted save
        leaves nothing at `out`."""
        return write_team(self, Path(out), card_extra or {})

    def __repr__(self) -> str:
        return (f"Team(task={self.task.name!r}, agents={self.num_agents}, level={self.level!r}, "
                f"topology={self.turns.topology!r}, turns={self.turns.num_turns})")


# -- writing a team (the directory magrpo-export writes) ---------------------------------------------------------------------------------


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


# -- helpers -------------------------------------------------------------------------------------


def checkpoint_of(path: str | Path, step: int | None, key: str) -> Path:
    """The verified checkpoint a run path (and `step`) names; an exported team is refused here."""
    from magrpo import checkpoint

    p = Path(str(path)).expanduser()
    if is_team_dir(p):
        raise ConfigError(f"{key}={str(path)!r} is an exported team ({TEAM_FILE}), not a training run; load it "
                          f"with Team.from_pretrained (magrpo-eval team=..., magrpo-crossplay take it as it is)")
    if step is not None:
        root = p / "checkpoints" if (p / "checkpoints").is_dir() else p
        steps = dict(checkpoint.step_dirs(root)) if root.is_dir() else {}
        if step not in steps:
            have = ", ".join(map(str, sorted(steps))) or "none"
            raise ConfigError(f"step={step}: {path} has no checkpoint step_{step} (its checkpoints: {have})")
        return checkpoint.resolve(steps[step], key)
    return checkpoint.resolve(p, key)


def load_team_agents(cfg: Any, hardware: Any, ckpt: Path | None) -> list:
    """The agents a config's algorithm builds (1 for the single-model form), with the trained
    weights of `ckpt` loaded into every policy; the base models when `ckpt` is None."""
    from magrpo import checkpoint
    from magrpo.algos import ALGOS
    from magrpo.models import load_agent_weights, load_agents, policy_agents

    spec = ALGOS[cfg.algo.name].team(cfg)
    if ckpt is not None:
        checkpoint.check_agents_match(OmegaConf.to_container(cfg, resolve=True), ckpt, spec.policy_dirs)
    agents = load_agents(cfg.agents, hardware, spec.num_agents, need_reference=False)
    if ckpt is not None:
        for policy in policy_agents(agents):
            load_agent_weights(policy, ckpt / policy.policy_name)
        log.info("loaded trained weights from %s", ckpt)
    return agents


def read_team(root: Path) -> dict[str, Any]:
    """team.json of an exported team, checked (and the files against the manifest)."""
    from magrpo import checkpoint
    from magrpo.writes import is_temp_name

    if is_temp_name(Path(root).resolve().name):
        raise ConfigError(f"{root}: the temporary directory of an export that did not finish; it is no team: "
                          f"export again with magrpo-export RUN_DIR OUT_DIR")
    f = root / TEAM_FILE
    if not f.is_file():
        raise ConfigError(f"{root}: not an exported team (no {TEAM_FILE}); write one with magrpo-export RUN_DIR OUT_DIR")
    checkpoint.verify(root, (TEAM_FILE,), "team")    # every file whole (magrpo-export writes the manifest last)
    try:
        info = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{f}: cannot read the team ({e})") from None
    if info.get("format") != FORMAT:
        raise ConfigError(f"{f}: format {info.get('format')!r}; this magrpo reads format {FORMAT}")
    return info


def local_team(path_or_repo: str | Path, revision: str | None = None) -> Path:
    """A team directory: the path itself, or the local copy of a hub repo id (downloaded once)."""
    p = Path(str(path_or_repo)).expanduser()
    if p.exists():
        if not p.is_dir():
            raise ConfigError(f"{path_or_repo}: a file; give an exported team's directory or a hub repo id")
        return p
    text = str(path_or_repo)
    if text.startswith((".", "/", "~")) or text.count("/") != 1:
        raise ConfigError(f"{text!r}: no such directory (and not a hub repo id 'owner/name')")
    from huggingface_hub import snapshot_download

    from magrpo import hub

    hub.ensure_mode()
    try:
        return Path(snapshot_download(repo_id=text, revision=revision))
    except Exception as e:
        reason = hub.offline_reason()
        if reason is not None:
            raise ConfigError(f"team {text!r} is not in the local cache and {reason}; on a machine with a network "
                              f"run `hf download {text} --local-dir DIR`, copy DIR here and load DIR "
                              f"(team=DIR, Team.from_pretrained(DIR))") from e
        raise ConfigError(f"could not download the team {text!r}: {type(e).__name__}: {e}") from e


def _agents_at(agents_cfg: DictConfig, info: dict[str, Any], root: Path) -> DictConfig:
    """The team's `agents` node with every model (and tokenizer) read from the exported directory."""
    cfg = OmegaConf.create(OmegaConf.to_container(agents_cfg, resolve=True))
    models = []
    for entry in info["models"]:
        spec = OmegaConf.create(OmegaConf.to_container(cfg.models[entry["spec"]]))
        spec.name_or_path = str(root / entry["load"])
        spec.tokenizer = str(root / entry["tokenizer"])
        spec.revision = None
        models.append(spec)
    cfg.models = models
    return cfg
