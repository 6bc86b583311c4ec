"""Frozen partners: train a team's roles with partners drawn from a population (Fictitious Co-Play).

    magrpo-train task=lever partners=[pop/seed_0,pop/seed_1,pop/seed_2]     # runs, checkpoints, teams
    magrpo-train task=lever partners=[pop]                                  # a population (magrpo-population)
    magrpo-train task=lever partners=[pop] partner_roles=[2]                # agent 2 is always a partner

Fictitious Co-Play (Strouse, McKee, Botvinick, Hughes, Everett, "Collaborating with Humans without
Human Data", NeurIPS 2021, arXiv 2110.08176) trains an agent against a frozen population of self-play partners and
their earlier checkpoints, so that what it learns is what works with many partners rather than one
private convention. Here, at each training step one member of the population is drawn
(`partner_sampling`: `uniform`, or `cycle` through the members in order) and fills the partner
roles (`partner_roles`, numbered from 1; null: one role drawn per step, so that every role of the
team learns to play with partners). The team's agents in the other roles play and are updated as
the algorithm updates them; a partner's role is not updated that step (its policy's other roles
are). The draw is seeded by the run's seed and the step, so a resumed run draws the same partners.

Partners are loaded once, before training, and stay frozen: no gradient, no optimizer state, never
saved into the run's checkpoints. A member may differ from the team in model and size; it must
play the same task with the same number of agents.

A population entry is any of:
  * a training run directory, or one of its checkpoints (`RUN/checkpoints/step_N`);
  * `RUN/checkpoints`: every complete checkpoint of the run (FCP's past checkpoints: save them
    with `save_every=K`);
  * an exported team (magrpo-export);
  * a directory holding `population.json` (magrpo-population): each member's checkpoints it lists.

The team's own agent of a role that is always a partner's (`partner_roles`) is never trained; it is
kept so that the run's checkpoint is a whole team. Every algorithm with two or more agents takes
partners; the single-model ones (grpo, ppo: one model writes the whole answer) have no role for one.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from magrpo.core import records
from magrpo.core.checkpoint import POPULATION_FILE, is_team_dir, step_dirs
from magrpo.core.schema import ConfigError
from magrpo.team.team import Team

log = logging.getLogger("magrpo")

SAMPLING = ("uniform", "cycle")


@dataclass
class Member:
    label: str            # the entry it came from (a path), for logs and summary.json
    agents: list[Any]     # the member's agents, one per role (frozen)


def expand(entries: list[str]) -> list[str]:
    """The checkpoints and teams a `partners=` list names, each entry expanded (module docstring)."""
    out: list[str] = []
    for entry in entries:
        p = Path(str(entry)).expanduser()
        if (p / POPULATION_FILE).is_file():
            out += population_members(p)
        elif p.name == "checkpoints" and p.is_dir() and not is_team_dir(p):
            found = step_dirs(p)
            if not found:
                raise ConfigError(f"partners: {entry} holds no complete checkpoint (step_N)")
            out += [str(d) for _, d in found]
        else:
            out.append(str(entry))
    if not out:
        raise ConfigError("partners=[] names no partner; give runs, checkpoints, exported teams or a population")
    if len(set(out)) < len(out):
        twice = sorted({x for x in out if out.count(x) > 1})
        raise ConfigError(f"partners: {', '.join(twice)} named more than once; each partner once")
    return out


def population_members(root: Path) -> list[str]:
    """The checkpoints a population's manifest lists (paths relative to the population's directory)."""
    f = root / POPULATION_FILE
    try:
        manifest = records.load_json(f)
        members = manifest["members"]
        paths = [str(root / c) for m in members for c in m["checkpoints"]]
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"{f}: not a population manifest ({type(e).__name__}: {e}); magrpo-population writes "
                          f"one") from None
    for c in paths:
        resolved = Path(c).resolve()
        if not resolved.is_relative_to(root.resolve()):
            raise ConfigError(f"{f}: member {c} is outside the population's directory; a manifest names its own "
                              f"checkpoints only")
    if not paths:
        raise ConfigError(f"{f} lists no member checkpoint")
    return paths


class PartnerPool:
    """The population's members, loaded once and frozen, and the per-step draw of who plays."""

    def __init__(self, entries: list[str], roles: list[int] | None, sampling: str, num_agents: int,
                 task_name: str, device: str | None, seed: int):
        if sampling not in SAMPLING:
            raise ConfigError(f"partner_sampling={sampling!r} is not allowed; choose one of: {', '.join(SAMPLING)}")
        self.roles = None if roles is None else tuple(sorted(r - 1 for r in roles))
        self.sampling, self.seed, self.num_agents = sampling, seed, num_agents
        self.members = load_members(entries, num_agents, task_name, device, "partners")
        log.info("partners: %d member(s) loaded and frozen (%s sampling, roles %s)", len(self.members), sampling,
                 "drawn per step" if self.roles is None else ", ".join(str(r + 1) for r in self.roles))

    def draw(self, step: int) -> tuple[int, tuple[int, ...]]:
        """(member index, the roles it fills) for training step `step` (0-based), seeded by the run's
        seed and the step."""
        rng = random.Random(f"partners/{self.seed}/{step}")
        member = step % len(self.members) if self.sampling == "cycle" else rng.randrange(len(self.members))
        roles = self.roles if self.roles is not None else (rng.randrange(self.num_agents),)
        return member, roles

    def seat(self, step: int) -> tuple[dict[int, Any], dict[str, float]]:
        """Role index -> the partner agent that plays it at `step`, and the step's metrics naming them."""
        member, roles = self.draw(step)
        agents = self.members[member].agents
        return {r: agents[r] for r in roles}, {"partners/member": float(member),
                                               **{f"partners/role_{r + 1}": 1.0 for r in roles}}


def load_members(entries: list[str], num_agents: int, task_name: str, device: str | None, key: str) -> list[Member]:
    """Every checkpoint and team the entries name (`expand`), loaded once and frozen; each must play
    task `task_name` with `num_agents` agents. `key`: the config key named in errors."""
    members: list[Member] = []
    for entry in expand(list(entries)):
        p = Path(entry).expanduser()
        if not p.exists():
            raise ConfigError(f"{key}: {entry}: no such run, checkpoint or exported team")
        team = Team.from_pretrained(p, device=device) if is_team_dir(p) else Team.from_run(p, device=device, key=key)
        if team.num_agents != num_agents:
            raise ConfigError(f"{key}: {entry} is a team of {team.num_agents} agent(s); this run's team has "
                              f"{num_agents}: a member plays the same game with the same team size")
        if team.task.name != task_name:
            raise ConfigError(f"{key}: {entry} plays task {team.task.name!r}, this run task {task_name!r}")
        for agent in team.agents:
            freeze(agent)
        members.append(Member(entry, list(team.agents)))
    return members


def freeze(agent: Any) -> None:
    """No gradient ever reaches a partner's weights, and it samples as in evaluation (no dropout)."""
    for model in (agent.model, getattr(agent, "reference", None)):
        if model is not None:
            model.requires_grad_(False)
            model.eval()


__all__ = ["Member", "POPULATION_FILE", "PartnerPool", "expand", "freeze", "load_members", "population_members"]
