"""A trained team as one object and one directory: `from magrpo import Team`.

    team = Team.from_pretrained("exports/tldr-team")     # a directory written by magrpo-export, or a hub id
    out = team.answer(item)                              # out.answer (the joint answer), out.parts (per agent)
    outs = team.answer_batch(items)
    texts = team.generate(["prompt for agent 1", "prompt for agent 2"])   # one answer per agent

A team is its agents (models, tokenizers, per-agent sampling) plus what makes them a team: the task
that writes each agent's prompt and assembles the joint answer, the topology (simultaneous or a
sequential chain), the turns and the feedback between them. `Team.from_run(RUN)` builds it from a
training run's newest complete checkpoint (or `step=`), `save_pretrained(DIR)` writes it as one
directory (the format `magrpo-export` writes, docs/team.md):

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

import huggingface_hub
import torch
import yaml
from omegaconf import DictConfig, OmegaConf

from magrpo import __version__, checkpoint, hub, records, trust
from magrpo.algos import ALGOS
from magrpo.checkpoint import OVERRIDES_FILE, TEAM_FILE, is_team_dir  # noqa: F401  (re-exported: a team's files)
from magrpo.config import TrainSchema
from magrpo.eval_loop import collect_answers
from magrpo.feedback import build_feedback
from magrpo.models import (
    _load_model,
    _load_tokenizer,
    _loading,
    load_agent_weights,
    load_agents,
    policy_agents,
    resolve_model_path,
    save_agent,
    team_level,
)
from magrpo.overrides import check_saved_line
from magrpo.rollout import Sampling, generate
from magrpo.schema import ConfigError
from magrpo.tasks import build_task
from magrpo.turns import TurnSpec
from magrpo.validation import validate
from magrpo.writes import is_temp_name

log = logging.getLogger(__name__)

FORMAT = 1
# The nodes of a run's config a team carries: what shapes the team and how it is scored.
TEAM_NODES = ("task", "reward", "algo", "agents", "feedback", "sandbox", "eval", "plugins")


@dataclass
class TeamAnswer:
    """One joint answer: `answer` assembled by the task from `parts` (one per agent, after the
    last turn); `turns[t]` the parts after turn t + 1; `reward` the task's reward of the joint
    answer, when it was scored."""

    answer: str
    parts: list[str]
    turns: list[list[str]] = field(default_factory=list)
    reward: float | None = None


# Keys of a team's config that loading sets itself, whatever the record says: each agent's model and
# tokenizer are the team's own folders.
TEAM_OWN_KEYS = ("agents.models.name_or_path", "agents.models.tokenizer")
TEAM_MODEL_KEYS = ("agents.models[*].name_or_path", "agents.models[*].tokenizer")


def with_overrides(config: DictConfig, overrides: dict[str, Any] | None) -> DictConfig:
    """`config` with the caller's own keys set (dotted key -> value): what a record you did not make
    cannot choose, given by you."""
    for key, value in (overrides or {}).items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"overrides: {key!r} is not a dotted config key (e.g. 'feedback.url')")
        OmegaConf.update(config, key, value, force_add=True)
    return config


def default_hardware(device: str | None = None) -> DictConfig:
    """A `hardware` node for loading outside a training run: one device for every agent."""
    return OmegaConf.create({"device": device or "auto", "agent_devices": None, "autocast": "none",
                             "gradient_checkpointing": False, "num_threads": None})


class Team:
    """Agents with the task, topology, turns and feedback they were trained with (module docstring)."""

    def __init__(self, config: DictConfig, agents: list, source: dict[str, Any] | None = None,
                 info: dict[str, Any] | None = None, loaded_from: DictConfig | None = None,
                 allowed: dict[str, str] | None = None, own: bool = True):
        self.config = config
        self.agents = agents
        self.source = source or {}
        self.info = info or {}          # team.json of a loaded team ({} for one built from a run)
        # How each code reference of the directory it was loaded from was allowed (magrpo.trust:
        # yours, or someone else's you trusted); None for a team built here from a config. Saving it
        # signs only what is yours, and its config's reach keys as yours only when `own`.
        self.allowed = allowed
        self.own = own
        # The `agents` node the models were loaded with: the run's own (config.agents, which keeps
        # the models the team was trained from), or an exported team's with its directories' paths.
        self.loaded_from = loaded_from if loaded_from is not None else config.agents
        self.task = build_task(config.task, config.reward, config.sandbox)
        self.turns = TurnSpec.from_algo(config.algo)
        self.feedback = build_feedback(config.feedback, self.task)

    # -- building ---------------------------------------------------------------------------------

    @classmethod
    @trust.one_call
    def from_run(cls, path: str | Path, step: int | None = None, device: str | None = None,
                 hardware: Any = None, key: str = "run", trust_remote_code: bool = False,
                 trust_plugins: bool = False, overrides: dict[str, Any] | None = None) -> Team:
        """The team of a training run (its newest complete checkpoint, or `checkpoints/step_<step>`),
        or of one checkpoint directory, with the trained weights loaded. `trust_remote_code`: yours
        to give; what the run's config says is not taken. The plugins and reward functions the run
        records are imported when you made it, trusted it (`magrpo-trust RUN`) or give
        `trust_plugins=True` here, for this call. Of a run you did not make, the keys that choose
        where data goes or what is read (a data path, a reviewer's URL: magrpo.key_classes) are not
        taken; give them in `overrides` ({"task.data.path": ...}), which win over the run's config
        (docs: Sharing teams and runs safely)."""
        ckpt = checkpoint_of(path, step, key)
        up = trust.take_up(ckpt, trust_plugins=True if trust_plugins else None)
        where = f"{ckpt}/{checkpoint.CONFIG_FILE}"
        stored = trust.taken_config(up.root, checkpoint.stored_config(ckpt), where, own=up.own)
        config = with_overrides(OmegaConf.create(stored), overrides)
        # the sandbox is this machine's (auto), never the run's
        team_cfg = typed_team_config(config, where)     # its plugins taken up above
        team_cfg.agents = with_trust(team_cfg.agents, trust_remote_code)
        agents = load_team_agents(team_cfg, hardware or default_hardware(device), ckpt)
        run = ckpt.parent.parent if ckpt.parent.name == "checkpoints" else None
        return cls(team_cfg, agents, source={"run_dir": str(run) if run else None, "checkpoint": str(ckpt),
                                             "step": checkpoint.checkpoint_step(ckpt)}, allowed=up.how, own=up.own)

    @classmethod
    @trust.one_call
    def from_pretrained(cls, path_or_repo: str | Path, device: str | None = None, hardware: Any = None,
                        revision: str | None = None, trust_remote_code: bool = False,
                        trust_plugins: bool = False, overrides: dict[str, Any] | None = None) -> Team:
        """A team exported by `magrpo-export` (`save_pretrained`): a local directory, or a hub repo id
        (downloaded once; offline, its cached copy). Only the files its manifest lists are read,
        weights as safetensors; Python code shipped with its models runs only with
        `trust_remote_code=True` given here (what team.json says is not taken). The plugins and
        reward functions it records are imported when you exported it yourself, trusted it
        (`magrpo-trust DIR`) or give `trust_plugins=True` here, for this call; otherwise loading
        stops before anything is imported, in one line. Of a team you did not export, the keys that
        choose where data goes or what is read (a reviewer's URL and key variable, a data path:
        magrpo.key_classes) are not taken, each said in one line; give them in `overrides`
        ({"feedback.url": ...}), which win over the team's config (docs: Sharing teams and runs safely)."""
        root = local_team(path_or_repo, revision)
        info, up = _read_team(root, trust_plugins)    # takes up the plugins it records first (its task may be one)
        stored = trust.taken_config(root, info["config"], f"{root}: config", exempt=TEAM_OWN_KEYS)
        config = typed_team_config(with_overrides(OmegaConf.create(stored), overrides), f"{root}: config")
        agents, agents_cfg = team_agents(root, info, config.agents, hardware or default_hardware(device),
                                         trust_remote_code)
        return cls(config, agents, source={**info.get("source", {}), "team_dir": str(root)}, info=info,
                   loaded_from=agents_cfg, allowed=up.how, own=up.own)

    # -- shape ------------------------------------------------------------------------------------

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    @property
    def level(self) -> str:
        return team_level(self.config.agents)

    def sampling(self, num_samples: int = 1, do_sample: bool | None = None, temperature: float | None = None):
        """How the team samples: the training run's decoding keys, `do_sample` and `temperature`
        from its eval settings unless given."""
        algo, ev = self.config.algo, self.config.eval
        return Sampling(num_generations=num_samples, max_new_tokens=algo.max_new_tokens,
                        do_sample=ev.do_sample if do_sample is None else do_sample,
                        temperature=ev.temperature if temperature is None else temperature,
                        top_p=algo.top_p, top_k=algo.top_k, max_prompt_length=algo.max_prompt_length,
                        share_prompt=algo.share_prompt)

    # -- using ------------------------------------------------------------------------------------

    def answer(self, item: dict, **kwargs: Any) -> TeamAnswer:
        """The team's joint answer to one task item: `answer_batch([item], **kwargs)[0]`."""
        return self.answer_batch([item], **kwargs)[0]

    @torch.no_grad()
    def answer_batch(self, items: list[dict], do_sample: bool | None = None, temperature: float | None = None,
                     seed: int = 0, batch_size: int = 16) -> list[TeamAnswer]:
        """Run the team on task items (dicts as the task's data has them, e.g. `team.task.load("eval")`)
        with its trained topology and turns; one TeamAnswer per item. Every turn is scored (the
        reward decides early stops and the feedback), so items need the fields the reward reads."""
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
    return (spec.name_or_path, spec.revision, spec.dtype)


def _layout(team: Any) -> tuple[list[dict], dict[tuple, str]]:
    """Per policy, where its weights go and what loading reads (`models` of team.json), and the
    base directory of every distinct base model a LoRA adapter rides on."""
    cfg = team.config.agents
    specs = list(cfg.models)
    shared_base = cfg.share_base
    entries, bases = [], {}
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


def _write_base(spec: Any, out: Path) -> None:
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
        "feedback": OmegaConf.to_container(cfg.feedback, resolve=True),
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
    """Write `team` to `out` atomically (magrpo.checkpoint.write_checkpoint with no config.json)."""
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


# -- helpers -------------------------------------------------------------------------------------


def checkpoint_of(path: str | Path, step: int | None, key: str) -> Path:
    """The verified checkpoint a run path (and `step`) names; an exported team is refused here."""
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


def team_agents(root: Path, info: dict[str, Any], agents: Any, hardware: Any,
                trust_remote_code: bool) -> tuple[list, DictConfig]:
    """An exported team's agents (read_team'd `info`), each loaded from the team's own folders with
    the `agents` settings (dtype, LoRA, sampling) of its config, and the agents node they were
    loaded with. `trust_remote_code`: the caller's, never the team's."""
    agents_cfg = with_trust(_agents_at(agents, info, root), trust_remote_code)
    loaded = load_agents(agents_cfg, hardware, info["num_agents"], need_reference=False, safetensors_only=True)
    if info["weights"] == "adapters":
        for policy in policy_agents(loaded):
            load_agent_weights(policy, root / policy.policy_name)
    return loaded, agents_cfg


def load_team_agents(cfg: Any, hardware: Any, ckpt: Path | None) -> list:
    """The agents a config's algorithm builds (1 for the single-model form), with the trained
    weights of `ckpt` loaded into every policy; the base models when `ckpt` is None."""
    spec = ALGOS[cfg.algo.name].team(cfg)
    if ckpt is not None:
        checkpoint.check_agents_match(OmegaConf.to_container(cfg, resolve=True), ckpt, spec.policy_dirs)
    agents = load_agents(cfg.agents, hardware, spec.num_agents, need_reference=False)
    if ckpt is not None:
        for policy in policy_agents(agents):
            load_agent_weights(policy, ckpt / policy.policy_name)
        log.info("loaded trained weights from %s", ckpt)
    return agents


def read_team(root: Path, trust_plugins: bool = False) -> dict[str, Any]:
    """team.json of an exported team, checked: the files against the manifest (every one inside the
    directory, none unlisted where loading reads), every field's type, then the plugins and reward
    modules it records taken up as the trust rule says (magrpo.trust; `trust_plugins`: the
    caller's say), and what the team claims (task, algorithm, team size, topology, turns, level,
    policies) against its config."""
    return _read_team(root, trust_plugins)[0]


def _read_team(root: Path, trust_plugins: bool = False) -> tuple[dict[str, Any], trust.TakeUp]:
    """read_team's record, and what its take-up allowed."""
    root = Path(root)
    if is_temp_name(root.resolve().name):
        raise ConfigError(f"{root}: the temporary directory of an export that did not finish; it is no team: "
                          f"export again with magrpo-export RUN_DIR OUT_DIR")
    f = root / TEAM_FILE
    if not root.exists():
        raise ConfigError(f"{str(root)!r}: no such directory (and not a hub repo id 'owner/name')")
    if not f.is_file():
        raise ConfigError(f"{root}: not an exported team (no {TEAM_FILE}); write one with magrpo-export RUN_DIR OUT_DIR")
    manifest = checkpoint.verify(root, (TEAM_FILE,), "team")   # every file whole and inside (written last)
    info = records.load_json(f)
    _check_fields(info, f)
    records.refuse_interpolations(info["config"], f"{f}: config")
    records.refuse_interpolations(info["overrides"] or [], f"{f}: overrides")
    adapters = {e["policy"] for e in info["models"] if e["adapter"]}     # a LoRA team's adapter folders
    for folder in sorted({e[k] for e in info["models"] for k in ("load", "tokenizer")} | adapters):
        checkpoint.check_only_listed(root, folder, manifest["files"], "team")
    _check_file_references(root, manifest["files"])
    up = trust.take_up(root, trust_plugins=True if trust_plugins else None)     # before anything is imported
    _check_config(info, f)
    return info, up


# -- checking a team someone else made ---------------------------------------------------------------------

# team.json's fields: name -> (the types allowed, what the one line says is expected)
_OBJ, _STR, _INT, _NUM = (dict,), (str,), (int,), (int, float)
RECORD_FIELDS: dict[str, tuple[tuple, str]] = {
    "format": (_INT, f"the integer {FORMAT}"), "task": (_STR, "a task name"),
    "num_agents": (_INT, "an integer >= 1"), "form": (_STR, "multi or single"),
    "level": (_STR, "separate, lora_per_role or shared_policy"), "algorithm": (_STR, "an algorithm name"),
    "topology": (_STR, "a topology name"), "turns": (_OBJ, "an object (num_turns, discount, ...)"),
    "feedback": (_OBJ, "an object (mode, ...)"), "assembly": (_STR, "a string"),
    "roles": ((list,), "a list with one object per agent"), "weights": (_STR, "adapters or full"),
    "models": ((list,), "a list with one object per policy"), "sampling": (_OBJ, "an object"),
    "source": (_OBJ, "an object"), "config": (_OBJ, "an object (the team's task, reward, algo, agents, ...)"),
}
OPTIONAL_FIELDS: dict[str, tuple[tuple, str]] = {
    "plugins": ((list, type(None)), "a list of module names, or null"),
    "overrides": ((list, type(None)), "a list of key=value strings, or null"),
    "final_eval": ((dict, type(None)), "an object, or null"),
}
MODEL_FIELDS = {"policy": (_STR, "a policy name"), "spec": (_INT, "an index into config.agents.models"),
                "adapter": ((bool,), "true or false"), "load": (_STR, "a folder of the team"),
                "tokenizer": (_STR, "a folder of the team")}


def _typed_field(where: Path | str, name: str, value: Any, types: tuple, expected: str) -> Any:
    bad_bool = isinstance(value, bool) and bool not in types     # JSON true is no number here
    if not isinstance(value, types) or bad_bool:
        raise ConfigError(f"{where}: {name} is {json.dumps(value)[:80] if _jsonable(value) else type(value).__name__}"
                          f"; expected {expected}")
    return value


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def check_team_record(info: Any, where: Path | str) -> None:
    """Every field of team.json typed, and what it claims agreeing with its config: one ConfigError
    line that names the field and what was expected. The plugins it records are taken up before
    (read_team: magrpo.trust); nothing is imported here."""
    _check_fields(info, where)
    _check_config(info, where)


def _check_config(info: dict, where: Path | str) -> None:
    """team.json's config validated, and what the record claims agreeing with it (fields checked)."""
    cfg = check_team_config(OmegaConf.create(info["config"]), f"{where}: config")
    _check_claims(info, cfg, where)


def _check_fields(info: Any, where: Path | str) -> None:
    """Every field of team.json present and of its type, the model folders' names included."""
    if not isinstance(info, dict):
        raise ConfigError(f"{where}: not a team record (a JSON object), but {type(info).__name__}")
    fmt = info.get("format")
    if fmt != FORMAT or isinstance(fmt, bool):
        raise ConfigError(f"{where}: format {fmt!r}; this magrpo reads format {FORMAT}")
    for name, (types, expected) in RECORD_FIELDS.items():
        if name not in info:
            raise ConfigError(f"{where}: the field {name!r} is missing; expected {expected}")
        _typed_field(where, name, info[name], types, expected)
    for name, (types, expected) in OPTIONAL_FIELDS.items():
        _typed_field(where, name, info.get(name), types, expected)
    if info["overrides"] is not None:
        for line in info["overrides"]:
            check_saved_line(line, f"{where}: overrides")
    if info["weights"] not in ("adapters", "full"):
        raise ConfigError(f"{where}: weights is {info['weights']!r}; expected adapters or full")
    for k, entry in enumerate(info["models"]):
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: models[{k}] is {type(entry).__name__}; expected an object ({', '.join(MODEL_FIELDS)})")
        for name, (types, expected) in MODEL_FIELDS.items():
            if name not in entry:
                raise ConfigError(f"{where}: models[{k}].{name} is missing; expected {expected}")
            _typed_field(where, f"models[{k}].{name}", entry[name], types, expected)
    for k, role in enumerate(info["roles"]):
        if not isinstance(role, dict) or not isinstance(role.get("policy"), str):
            raise ConfigError(f"{where}: roles[{k}] is not an object with a policy name")
    for k, entry in enumerate(info["models"]):
        for key in ("load", "tokenizer"):
            name = entry[key]
            if not name or "/" in name or "\\" in name or name in (".", "..") or name.startswith("."):
                raise ConfigError(f"{where}: models[{k}].{key} is {name!r}; expected the name of a folder of the team "
                                  f"(agent_1, policy, base, ...)")


def typed_team_config(config: DictConfig, where: Path | str) -> DictConfig:
    """A recorded team config (a checkpoint's config.json or team.json's `config`) as the team
    reads it: validated and typed (every key with its schema default), the team's nodes only, with
    its models' recorded paths and tokenizers, and this machine's sandbox (`auto`), never the
    record's."""
    typed = check_team_config(config, where)
    out = OmegaConf.create({k: OmegaConf.to_container(typed[k]) for k in TEAM_NODES if k in typed})
    for spec, recorded in zip(out.agents.models, config.agents.models):
        spec.name_or_path, spec.tokenizer = recorded.name_or_path, recorded.get("tokenizer")
    return out


def check_team_config(config: DictConfig, where: Path | str) -> DictConfig:
    """A team's config (team.json's `config`, or a checkpoint's config.json) validated as a run's
    config is: the one-line ConfigError names the key. Model paths are not checked here (an exported
    team's models are its own folders)."""
    missing = [k for k in ("task", "algo", "agents") if k not in config or not OmegaConf.is_dict(config[k])]
    if missing:
        raise ConfigError(f"{where}: the node(s) {', '.join(missing)} are missing; a team's config holds its "
                          f"task, reward, algo and agents")
    # what it names, resolved, was taken up (read_team, from_run); its trust_remote_code and sandbox are
    # set by the loader, never taken from it
    trust.check_composed(config, str(where), caller_keys=False)
    try:
        nodes = {k: OmegaConf.to_container(config[k], resolve=True) for k in TEAM_NODES
                 if k in config and k != "sandbox"}
        for spec in nodes["agents"].get("models") or []:
            if isinstance(spec, dict) and isinstance(spec.get("name_or_path"), str):
                spec["name_or_path"] = "builtin:tiny"        # where the weights are is checked elsewhere
                spec["tokenizer"] = None
        return validate(OmegaConf.merge(OmegaConf.structured(TrainSchema), nodes), recorded=True)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    except Exception as e:       # a node of the wrong shape that the schemas do not reach
        raise ConfigError(f"{where}: not a valid team config ({type(e).__name__}: "
                          f"{str(e).strip().splitlines()[0] if str(e).strip() else ''})") from None


def _check_claims(info: dict, cfg: DictConfig, where: Path | str) -> None:
    """What team.json says of the team must be what its config builds."""
    spec = ALGOS[cfg.algo.name].team(cfg)
    turns = TurnSpec.from_algo(cfg.algo)
    feedback = cfg.feedback.mode
    claims = [("task", info["task"], cfg.task.name), ("algorithm", info["algorithm"], cfg.algo.name),
              ("num_agents", info["num_agents"], spec.num_agents), ("form", info["form"], spec.form),
              ("level", info["level"], team_level(cfg.agents)), ("topology", info["topology"], turns.topology),
              ("turns.num_turns", info["turns"].get("num_turns"), turns.num_turns),
              ("feedback.mode", info["feedback"].get("mode", "none"), feedback),
              ("roles (their count)", len(info["roles"]), spec.num_agents),
              ("models (their policies)", [m["policy"] for m in info["models"]], spec.policy_dirs)]
    for name, claimed, built in claims:
        if claimed != built:
            raise ConfigError(f"{where}: {name} is {claimed!r} but the team's config builds {built!r}; the team "
                              f"contradicts itself and is not loaded")
    num_specs = len(cfg.agents.models)
    for k, entry in enumerate(info["models"]):
        if not 0 <= entry["spec"] < num_specs:
            raise ConfigError(f"{where}: models[{k}].spec is {entry['spec']}; the config has {num_specs} model "
                              f"entr{'y' if num_specs == 1 else 'ies'} (0..{num_specs - 1})")
    adapters = any(m["adapter"] for m in info["models"])
    if (info["weights"] == "adapters") != adapters:
        raise ConfigError(f"{where}: weights is {info['weights']!r} but models say "
                          f"{'adapters' if adapters else 'full weights'}")


# Tokenizer settings that name a file: transformers opens whatever they say, so they must name a
# listed file of the same folder (or nothing).
_INDEX_SUFFIX = ".index.json"


def _check_file_references(root: Path, files: dict) -> None:
    """Files a loader opens because another file names it (a sharded model's index, a tokenizer's
    `*_file` settings) must be listed files of the same folder."""
    for name in files:
        folder, _, base = name.rpartition("/")
        if base.endswith(_INDEX_SUFFIX) or base == "tokenizer_config.json":
            data = records.load_json(root / name)
            if not isinstance(data, dict):
                raise ConfigError(f"{root}: {name} is not a JSON object")
            weight_map = data.get("weight_map") or {}
            if base.endswith(_INDEX_SUFFIX) and not isinstance(weight_map, dict):
                raise ConfigError(f"{root}: {name}: weight_map is {type(weight_map).__name__}; expected an object "
                                  f"(tensor name -> file)")
            named = (list(weight_map.values()) if base.endswith(_INDEX_SUFFIX) else
                     [v for k, v in data.items() if str(k).endswith("_file") and v is not None])
            for ref in named:
                target = f"{folder}/{ref}" if folder else str(ref)
                if not isinstance(ref, str) or "/" in ref or "\\" in ref or target not in files:
                    raise ConfigError(f"{root}: {name} names the file {str(ref)[:120]!r}, which is not a listed file "
                                      f"of {folder or 'the team'}/; a team reads only its own listed files")


def with_trust(agents_cfg: DictConfig, trust_remote_code: bool) -> DictConfig:
    """The agents node with every model's trust_remote_code set to the caller's choice (whatever the
    artifact said), and a warning naming what is trusted."""
    cfg = OmegaConf.create(OmegaConf.to_container(agents_cfg, resolve=True))
    for spec in cfg.models:
        spec.trust_remote_code = bool(trust_remote_code)
    if trust_remote_code:
        log.warning("trust_remote_code=True (your call): Python code shipped with %s may run",
                    ", ".join(sorted({str(s.name_or_path) for s in cfg.models})))
    return cfg


def local_team(path_or_repo: str | Path, revision: str | None = None) -> Path:
    """A team directory: the path itself, or the local copy of a hub repo id (downloaded once)."""
    p = Path(str(path_or_repo)).expanduser()
    if p.exists():
        if not p.is_dir():
            raise ConfigError(f"{path_or_repo}: a file; give an exported team's directory or a hub repo id")
        return p
    text = str(path_or_repo)
    if not hub.is_repo_id(text):
        raise ConfigError(f"{text!r}: no such directory (and not a hub repo id 'owner/name')")

    hub.ensure_mode()
    try:
        return Path(huggingface_hub.snapshot_download(repo_id=text, revision=revision))
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
    root = Path(root).absolute()      # `team` relative to here is a directory, never a hub id
    for entry in info["models"]:
        spec = OmegaConf.create(OmegaConf.to_container(cfg.models[entry["spec"]]))
        spec.name_or_path = str(root / entry["load"])
        spec.tokenizer = str(root / entry["tokenizer"])
        spec.revision = None
        models.append(spec)
    cfg.models = models
    return cfg


def check_team_option(cfg: DictConfig) -> None:
    """magrpo-eval's `team=` names a whole exported team whose agents match the ones the (validated)
    config builds; `cfg.team` becomes the team's local directory."""
    root = local_team(cfg.team)
    info = read_team(root)
    # the team's models are its own folders; the base models they came from count only for eval.ablation=base
    base = cfg.eval.diagnostics and cfg.eval.ablation == "base"
    free = () if base else TEAM_MODEL_KEYS
    changes = checkpoint.config_changes(info["config"], OmegaConf.to_container(cfg, resolve=True),
                                        only=checkpoint.AGENT_KEYS, free=free)
    if changes:
        raise ConfigError(f"team={str(cfg.team)!r} was trained with other agents settings ({checkpoint.describe(changes)}); "
                          f"an exported team's models are its own: drop the agents overrides")
    policies = ALGOS[cfg.algo.name].team(cfg).policy_dirs
    held = [m["policy"] for m in info["models"]]
    if policies != held:
        raise ConfigError(f"team={str(cfg.team)!r} holds {len(held)} policy(ies) ({', '.join(held)}) but "
                          f"algo={cfg.algo.name} builds {len(policies)} ({', '.join(policies)}); evaluate it with "
                          f"the algo it was trained with ({info['algorithm']})")
    OmegaConf.set_struct(cfg, False)
    cfg.team = str(root)
    OmegaConf.set_struct(cfg, True)
