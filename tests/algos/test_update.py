"""The policy update: masking, loss aggregation, the direction of a step, PPO and KL paths."""

import pytest
import torch

from magrpo.algos.aggregation import LOSS_AGG, AggContext
from magrpo.algos.logprobs import token_logprobs
from magrpo.algos.magrpo import MAGRPO
from magrpo.models.agents import load_agents
from magrpo.rollout.record import Generation, Sampling, generate
from magrpo.tasks import build_task
from magrpo.validation.checks import validate


def _setup(make_cfg, overrides=()):
    cfg = validate(make_cfg(["algo.micro_batch_size=3", *overrides]))
    agents = load_agents(cfg.agents, cfg.hardware, cfg.agents.num_agents, need_reference=cfg.algo.beta > 0)
    return cfg, agents, MAGRPO(cfg, agents, build_task(cfg.task, cfg.reward))


def _generation(agent, n_prompts=2, G=3, tokens=12):
    torch.manual_seed(0)
    return generate(agent, [f"explain topic {i}" for i in range(n_prompts)], Sampling(G, tokens))


def _grads(agent, gen, adv, agg="seq_sum"):
    agent.model.zero_grad(set_to_none=True)
    p_ids, p_mask = gen.prompt_rows()
    logp, _ = token_logprobs(agent.model, p_ids, p_mask, gen.completion_ids, gen.completion_mask)
    ctx = AggContext(len(adv), int(gen.completion_mask.sum()), gen.completion_ids.shape[1])
    LOSS_AGG[agg](-adv.unsqueeze(-1) * logp, gen.completion_mask, ctx).backward()
    return [p.grad.clone() for p in agent.model.parameters() if p.grad is not None]


def _with_eos_at(gen: Generation, eos: int, row: int, pos: int) -> Generation:
    ids = gen.completion_ids.clone()
    ids[row, pos] = eos
    mask = gen.completion_mask.clone()
    mask[row, pos + 1:] = 0
    return Generation(gen.prompt_ids, gen.prompt_mask, ids, mask, gen.texts, gen.num_generations, 0.0)


def test_post_eos_and_padding_tokens_never_change_the_gradient(make_cfg):
    _, agents, _ = _setup(make_cfg)
    agent = agents[0]
    eos = agent.tokenizer.eos_token_id
    gen = _with_eos_at(_generation(agent), eos, row=1, pos=4)
    adv = torch.tensor([1.0, -2.0, 0.5, 0.3, -0.1, 1.2])
    before = _grads(agent, gen, adv)
    garbage = gen.completion_ids.clone()
    garbage[1, 5:] = torch.randint(0, 300, (garbage.shape[1] - 5,))   # anything after the EOS
    changed = Generation(gen.prompt_ids, gen.prompt_mask, garbage, gen.completion_mask, gen.texts, 3, 0.0)
    after = _grads(agent, changed, adv)
    for a, b in zip(before, after):
        assert torch.allclose(a, b, atol=1e-7)
    # and the same holds for every aggregation
    for agg in LOSS_AGG:
        for a, b in zip(_grads(agent, gen, adv, agg), _grads(agent, changed, adv, agg)):
            assert torch.allclose(a, b, atol=1e-7)


def test_padding_in_the_prompt_does_not_change_completion_logprobs(make_cfg):
    _, agents, _ = _setup(make_cfg)
    agent = agents[0]
    gen = _generation(agent, n_prompts=1, G=1)
    p_ids, p_mask = gen.prompt_rows()
    logp, _ = token_logprobs(agent.model, p_ids, p_mask, gen.completion_ids, gen.completion_mask)
    pad = torch.full((1, 5), agent.tokenizer.pad_token_id)
    logp_padded, _ = token_logprobs(agent.model, torch.cat([pad, p_ids], 1),
                                    torch.cat([torch.zeros_like(pad), p_mask], 1),
                                    gen.completion_ids, gen.completion_mask)
    assert torch.allclose(logp, logp_padded, atol=1e-5)


@pytest.mark.parametrize("agg", sorted(LOSS_AGG))
def test_micro_batches_accumulate_to_the_full_batch_gradient(make_cfg, agg):
    _, agents, _ = _setup(make_cfg)
    agent = agents[0]
    gen = _with_eos_at(_generation(agent), agent.tokenizer.eos_token_id, row=2, pos=3)
    adv = torch.tensor([1.0, -2.0, 0.5, 0.3, -0.1, 1.2])
    full = _grads(agent, gen, adv, agg)
    agent.model.zero_grad(set_to_none=True)
    ctx = AggContext(6, int(gen.completion_mask.sum()), gen.completion_ids.shape[1])
    for mb in (slice(0, 4), slice(4, 6)):
        p_ids, p_mask = gen.prompt_rows(mb)
        logp, _ = token_logprobs(agent.model, p_ids, p_mask, gen.completion_ids[mb], gen.completion_mask[mb])
        LOSS_AGG[agg](-adv[mb].unsqueeze(-1) * logp, gen.completion_mask[mb], ctx).backward()
    acc = [p.grad for p in agent.model.parameters() if p.grad is not None]
    for a, b in zip(full, acc):
        assert torch.allclose(a, b, atol=1e-6)


def _seq_logp(agent, gen):
    with torch.no_grad():
        p_ids, p_mask = gen.prompt_rows()
        logp, _ = token_logprobs(agent.model, p_ids, p_mask, gen.completion_ids, gen.completion_mask)
    return (logp * gen.completion_mask).sum(-1)


@pytest.mark.parametrize("extra", [[], ["algo.loss=clip", "algo.num_iterations=2"], ["algo.loss_agg=token_mean"]])
def test_one_step_raises_the_logprob_of_the_higher_advantage_completion(make_cfg, extra):
    _, agents, algo = _setup(make_cfg, ["optimizer.lr=1e-3", *extra])
    agent = agents[0]
    gen = _generation(agent, n_prompts=1, G=2)
    before = _seq_logp(agent, gen)
    metrics = algo._update(0, gen, torch.tensor([1.0, -1.0]))
    after = _seq_logp(agent, gen)
    assert after[0] > before[0], "the positive-advantage completion must gain log-probability"
    assert after[0] - before[0] > after[1] - before[1], "and gain more than the negative-advantage one"
    assert metrics["loss"] == pytest.approx(metrics["loss"])  # finite
    if extra == ["algo.loss=clip", "algo.num_iterations=2"]:
        assert 0.0 <= metrics["clip_frac"] <= 1.0


def test_kl_to_reference_is_zero_before_and_positive_after_updates(make_cfg):
    _, agents, algo = _setup(make_cfg, ["algo.beta=0.1", "optimizer.lr=1e-2"])
    agent = agents[0]
    assert agent.reference is not None
    gen = _generation(agent, n_prompts=1, G=2)
    first = algo._update(0, gen, torch.tensor([1.0, -1.0]))
    assert first["kl"] == pytest.approx(0.0, abs=1e-6)   # policy == reference before the first step
    second = algo._update(0, gen, torch.tensor([1.0, -1.0]))
    assert second["kl"] > 0.0
