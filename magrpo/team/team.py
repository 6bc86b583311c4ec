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

Nothing here needs Hydra: the config is a validated RunConfig (magrpo.config.run), loading works offline from the
directory, and a hub id is fetched once with `huggingface_hub.snapshot_download`.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from magrpo.algos import ALGOS
from magrpo.config.run import RunConfig
from magrpo.config.schemas import AgentsSchema, HardwareSchema
from magrpo.core import checkpoint, received, trust
from magrpo.core.checkpoint import TEAM_FILE, is_team_dir
from magrpo.core.instances import as_data
from magrpo.core.schema import ConfigError
from magrpo.models.agents import (
    load_agent_weights,
    load_agents,
    policy_agents,
    team_level,
)
from magrpo.rollout.answers import collect_answers
from magrpo.rollout.feedback import build_feedback
from magrpo.rollout.record import Sampling, generate
from magrpo.rollout.turns import TurnSpec
from magrpo.tasks import build_task
from magrpo.team.checks import TEAM_OWN_KEYS, _read_team, local_team, typed_team_config
from magrpo.team.format import write_team

log = logging.getLogger(__name__)


@dataclass
class TeamAnswer:
    """One joint answer: `answer` assembled by the task from `parts` (one per agent, after the
    last turn); `turns[t]` the parts after turn t + 1; `reward` the task's reward of the joint
    answer, when it was scored."""

    answer: str
    parts: list[str]
    turns: list[list[str]] = field(default_factory=list)
    reward: float | None = None


def with_overrides(record: DictConfig, overrides: dict[str, Any] | None) -> DictConfig:
    """A recorded config (a node, before it is validated) with the caller's own keys set (dotted key
    -> value): what a record you did not make cannot choose, given by you."""
    for key, value in (overrides or {}).items():
        if not isinstance(key, str) or not key:
            raise ConfigError(f"overrides: {key!r} is not a dotted config key (e.g. 'feedback.url')")
        OmegaConf.update(record, key, value, force_add=True)
    return record


def default_hardware(device: str | None = None) -> HardwareSchema:
    """The hardware for loading outside a training run: one device for every agent (`auto` unless
    given), every other key its schema default."""
    return HardwareSchema(device=device or "auto")


class Team:
    """Agents with the task, topology, turns and feedback they were trained with (module docstring)."""

    def __init__(self, config: RunConfig, agents: list, source: dict[str, Any] | None = None,
                 info: dict[str, Any] | None = None, loaded_from: AgentsSchema | None = None,
                 allowed: dict[str, str] | None = None, own: bool = True):
        self.config = config
        self.agents = agents
        self.source = source or {}
        self.info = info or {}          # team.json of a loaded team ({} for one built from a run)
        # How each code reference of the directory it was loaded from was allowed (magrpo.core.trust:
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
                 hardware: HardwareSchema | None = None, key: str = "run", trust_remote_code: bool = False,
                 trust_plugins: bool = False, overrides: dict[str, Any] | None = None) -> Team:
        """The team of a training run (its newest complete checkpoint, or `checkpoints/step_<step>`),
        or of one checkpoint directory, with the trained weights loaded. `trust_remote_code`: yours
        to give; what the run's config says is not taken. The plugins and reward functions the run
        records are imported when you made it, trusted it (`magrpo-trust RUN`) or give
        `trust_plugins=True` here, for this call. Of a run you did not make, the keys that choose
        where data goes or what is read (a data path, a reviewer's URL: magrpo.core.key_classes) are not
        taken; give them in `overrides` ({"task.data.path": ...}), which win over the run's config
        (docs: Sharing teams and runs safely)."""
        ckpt = checkpoint_of(path, step, key)
        up = trust.take_up(ckpt, trust_plugins=True if trust_plugins else None)
        where = f"{ckpt}/{checkpoint.CONFIG_FILE}"
        stored = received.taken_config(up.root, checkpoint.stored_config(ckpt), where, own=up.own)
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
    def from_pretrained(cls, path_or_repo: str | Path, device: str | None = None, hardware: HardwareSchema | None = None,
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
        magrpo.core.key_classes) are not taken, each said in one line; give them in `overrides`
        ({"feedback.url": ...}), which win over the team's config (docs: Sharing teams and runs safely)."""
        root = local_team(path_or_repo, revision)
        info, up = _read_team(root, trust_plugins)    # takes up the plugins it records first (its task may be one)
        stored = received.taken_config(root, info["config"], f"{root}: config", exempt=TEAM_OWN_KEYS)
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


def team_agents(root: Path, info: dict[str, Any], agents: AgentsSchema, hardware: HardwareSchema,
                trust_remote_code: bool) -> tuple[list, AgentsSchema]:
    """An exported team's agents (read_team'd `info`), each loaded from the team's own folders with
    the `agents` settings (dtype, LoRA, sampling) of its config, and the agents node they were
    loaded with. `trust_remote_code`: the caller's, never the team's."""
    agents_cfg = with_trust(_agents_at(agents, info, root), trust_remote_code)
    loaded = load_agents(agents_cfg, hardware, info["num_agents"], need_reference=False, safetensors_only=True)
    if info["weights"] == "adapters":
        for policy in policy_agents(loaded):
            load_agent_weights(policy, root / policy.policy_name)
    return loaded, agents_cfg


def load_team_agents(cfg: RunConfig, hardware: HardwareSchema, ckpt: Path | None) -> list:
    """The agents a config's algorithm builds (1 for the single-model form), with the trained
    weights of `ckpt` loaded into every policy; the base models when `ckpt` is None."""
    spec = ALGOS[cfg.algo.name].team(cfg)
    if ckpt is not None:
        checkpoint.check_agents_match(as_data(cfg), ckpt, spec.policy_dirs)
    agents = load_agents(cfg.agents, hardware, spec.num_agents, need_reference=False)
    if ckpt is not None:
        for policy in policy_agents(agents):
            load_agent_weights(policy, ckpt / policy.policy_name)
        log.info("loaded trained weights from %s", ckpt)
    return agents


# -- checking a team someone else made ---------------------------------------------------------------------



def with_trust(agents_cfg: AgentsSchema, trust_remote_code: bool) -> AgentsSchema:
    """The agents node with every model's trust_remote_code set to the caller's choice (whatever the
    artifact said), and a warning naming what is trusted."""
    cfg = copy.deepcopy(agents_cfg)
    for spec in cfg.models:
        spec.trust_remote_code = bool(trust_remote_code)
    if trust_remote_code:
        log.warning("trust_remote_code=True (your call): Python code shipped with %s may run",
                    ", ".join(sorted({str(s.name_or_path) for s in cfg.models})))
    return cfg


def _agents_at(agents_cfg: AgentsSchema, info: dict[str, Any], root: Path) -> AgentsSchema:
    """The team's `agents` node with every model (and tokenizer) read from the exported directory."""
    root = Path(root).absolute()      # `team` relative to here is a directory, never a hub id
    models = [dataclasses.replace(agents_cfg.models[entry["spec"]], name_or_path=str(root / entry["load"]),
                                  tokenizer=str(root / entry["tokenizer"]), revision=None)
              for entry in info["models"]]
    return dataclasses.replace(agents_cfg, models=models)
