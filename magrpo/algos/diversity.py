"""A population's diversity term: a bonus for answers the earlier members would not give.

Members of a population trained one after another (magrpo-population) from the same recipe tend to
settle on the same conventions, so a partner drawn from them is no stranger. Trajectory Diversity
(Lupu, Cui, Hu and Foerster, "Trajectory Diversity for Zero-Shot Coordination", ICML 2021) trains
the members jointly to make their trajectory distributions differ (a Jensen-Shannon divergence).
For a member trained after J frozen ones, the part of that objective its own policy pi can move is
the cross-entropy of its answers under the earlier members' mixture, which is what is built here:

    pibar(tau | s) = (1/J) sum_j pi_j(tau | s)                  the earlier members' mixture
    D(pi) = E_{s, tau ~ pi(. | s)} [ -log pibar(tau | s) ]        how unlikely they find pi's answers

with log pi_j(tau | s) = sum_t log pi_j(c_t | s, c_<t) over the answer's tokens (the members'
sampling temperature). pibar does not depend on pi, so the gradient of D is
E[-log pibar(tau | s) grad log pi(tau | s)]: D is a reward. Each sample's return gains
lam * (-log pibar(tau | s)), with lam = `diversity_coef`, and the batch mean of -log pibar is
logged as train/agent_<k>/diversity_nll (nats).

Its scale is that of a sequence log-likelihood against converged members: an answer they would not
give scores tens of nats (about 60 for `lever`'s four-token answers against one trained member, about
15 per token), one they would give about 0, so lam is small (0.02 on `lever` makes copying an earlier
member's lever cost about as much as the game pays) and smaller still for long answers. Against an
untrained pool every answer is about equally unlikely and the term teaches little.

`diversity=[...]` names the earlier members (the entries `partners=` takes: runs, checkpoints,
exported teams, populations); they are loaded once, frozen, and read each answer of the agent of
their own role. Every algorithm that takes its returns from `Episode.returns` adds it there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from magrpo.algos.logprobs import rollout_logprobs, row_chunks

CHUNK_ROWS = 64        # answers per forward of a member's model


def mixture_nll(seq_logps: torch.Tensor) -> torch.Tensor:
    """[n] -log pibar of each answer, from [J, n] sequence log-likelihoods under J members:
    -(logsumexp_j log pi_j - log J)."""
    if seq_logps.dim() != 2 or seq_logps.shape[0] < 1:
        raise ValueError(f"expected [J, n] log-likelihoods with J >= 1, got shape {tuple(seq_logps.shape)}")
    return -(torch.logsumexp(seq_logps, dim=0) - math.log(seq_logps.shape[0]))


@dataclass
class Diversity:
    """The frozen earlier members (per member, its agents by role) and lam."""

    coef: float
    members: list[list[Any]]
    temperature: float = 1.0

    @torch.no_grad()
    def nll(self, gen: Any, role: int) -> torch.Tensor:
        """[n] -log pibar of each answer of a Generation written in role `role` (0-based)."""
        n = gen.completion_ids.shape[0]
        mask = gen.completion_mask.float()
        seq = []
        for agents in self.members:
            agent = agents[role]
            logp = rollout_logprobs(agent.model, gen, row_chunks(n, CHUNK_ROWS), self.temperature, agent.device)
            seq.append((logp.float().cpu() * mask).sum(-1))
        return mixture_nll(torch.stack(seq))


__all__ = ["Diversity", "mixture_nll"]
