"""Positive signalling: a bonus for answers whose move depends on what the agent read.

Eccles, Bachrach, Lever, Lazaridou and Graepel, "Biases for Emergent Communication in
Multi-Agent Reinforcement Learning" (NeurIPS 2019), bias a speaker towards messages that carry
its observation by adding the mutual information between message and observation to its
objective. Here the observation is the agent's prompt s, the message the move m its answer makes
(`Task.move`: a game's letter, or the answer itself), and the objective gains lam * I(m; s):

    I(m; s) = sum_s p(s) sum_m pi(m | s) log2 [pi(m | s) / pibar(m)],  pibar(m) = sum_s p(s) pi(m | s)

Its gradient is E[pmi(m, s) grad log pi(m | s)] with pmi(m, s) = log2 pi(m | s) - log2 pibar(m) (the
terms from differentiating the logs vanish: E_m[grad log pi(m | s)] = 0 and sum_m grad pibar(m) = 0),
so the bonus is a reward: each sample's return gains lam * pmi(m, s), estimated from the batch's
counts, pmi = log2 [n(s, m) / n(s)] - log2 [n(m) / N]. Its mean over the batch is the batch's
empirical I(m; s) in bits. Pooling two prompts on one move while another move goes unused lowers
the pmi of the pooled samples (log2 2 instead of log2 4 for 4 prompts, one move each), and a sample
that tries the unused move earns a high one: the bonus pays for leaving a partial code, which the
game's reward alone does not. (Eccles et al. also pull the per-prompt entropy towards a target
rather than to 0; that term is not built here.)

`algo.signal_bonus` = lam (0: off, the default) and `algo.signal_agents` (the agents, numbered from
1, that get it; null: every agent) choose it; every algorithm that takes its returns from
`Episode.returns` adds it there.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from magrpo.tasks.metrics import pointwise_mutual_information


def pointwise_mi(prompts: Sequence[Hashable], moves: Sequence[Hashable]) -> torch.Tensor:
    """[n] pmi(m_r, s_r) in bits of each row r, from the counts of the n (prompt, move) pairs
    (a None move is a move of its own, as an empty message is a signal)."""
    if len(prompts) != len(moves):
        raise ValueError(f"{len(prompts)} prompts for {len(moves)} moves")
    return torch.tensor(pointwise_mutual_information(list(zip(prompts, moves))), dtype=torch.float32)


def row_prompts(prompts: Sequence[str], num_rows: int) -> list[str]:
    """The prompt each of `num_rows` completion rows answers (rows grouped by prompt, in order)."""
    if not prompts or num_rows % len(prompts):
        raise ValueError(f"{num_rows} completions do not divide among {len(prompts)} prompts")
    per = num_rows // len(prompts)
    return [prompts[r // per] for r in range(num_rows)]
