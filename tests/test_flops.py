"""Training FLOPs (magrpo.models.flops): the count of a step's passes on the tiny built-in model
against a hand computation (parameters x tokens), and the training loop's per-step and total counts
in metrics.jsonl and summary.json, kept across a resume."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from magrpo.algos.logprobs import sequence_forward
from magrpo.models import flops
from magrpo.models.tiny import builtin_config

# builtin:tiny (magrpo.models.model_shapes): Qwen2, width 64, 2 layers, 4 query heads of 16, 2 key/value
# heads (32 wide), MLP 128, vocabulary 512, the head tied to the embedding. Per layer:
#   q 64*64 + 64, k 64*32 + 32, v 64*32 + 32, o 64*64, gate/up/down 3 * 64*128, two norms 2 * 64
#   = 4160 + 2080 + 2080 + 4096 + 24576 + 128 = 37120
# body = 2 * 37120 + 64 (the final norm) = 74304; head = 512 * 64 = 32768 (the embedding: one tensor).
BODY, HEAD = 74304, 32768


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(builtin_config("tiny"))


def test_the_tiny_models_sizes_are_the_hand_counted_ones(tiny):
    s = flops.sizes(tiny)
    assert (s.body, s.head, s.body_trainable, s.head_trainable) == (BODY, HEAD, BODY, True)
    assert s.body + s.head == sum(p.numel() for p in tiny.parameters())      # tied: the head counts once


def _batch():
    """Two distinct prompts (3 and 5 tokens, left-padded to 5) continued by four completions
    (2, 3, 1 and 3 tokens), rows 0-1 of the first prompt and rows 2-3 of the second."""
    prompt_ids = torch.randint(1, 500, (2, 5))
    prompt_mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    completion_ids = torch.randint(1, 500, (4, 3))
    completion_mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]])
    return prompt_ids, prompt_mask, completion_ids, completion_mask, torch.tensor([0, 0, 1, 1])


def test_a_scoring_pass_and_an_update_pass_count_parameters_times_tokens(tiny):
    ids, mask, cids, cmask, index = _batch()
    # Each row its prompt then its completion: 3 + 3 + 5 + 5 = 16 prompt tokens, 2 + 3 + 1 + 3 = 9 completion
    # tokens, the head at the 9 completion positions. Scoring (no gradient): 2 N per token.
    with torch.no_grad(), flops.counting() as count:
        sequence_forward(tiny, ids, mask, cids, cmask, prompt_index=index)
    assert count.flops == 2 * (BODY * 25 + HEAD * 9) == 4_305_024
    # The update: the same forward, then a backward through every (trainable) weight: 6 N per token.
    with flops.counting() as count:
        logits, _ = sequence_forward(tiny, ids, mask, cids, cmask, prompt_index=index)
        logits.sum().backward()
    assert count.flops == 6 * (BODY * 25 + HEAD * 9) == 12_915_072
    # A shared prompt runs once: 3 + 5 prompt tokens.
    with torch.no_grad(), flops.counting() as count:
        sequence_forward(tiny, ids, mask, cids, cmask, prompt_index=index, share_prompt=True)
    assert count.flops == 2 * (BODY * 17 + HEAD * 9)
    # Frozen weights (a reference model, LoRA's base): no weight gradients, 4 N per token with a backward.
    tiny.requires_grad_(False)
    try:
        s = flops.sizes(tiny)
        assert flops.pass_flops(s, 25, 9, backward=True) == 4 * (BODY * 25 + HEAD * 9)
    finally:
        tiny.requires_grad_(True)
    # Outside a count nothing is counted, and counts nest.
    with flops.counting() as outer:
        with flops.counting() as inner, torch.no_grad():
            sequence_forward(tiny, ids, mask, cids, cmask, prompt_index=index)
    assert inner.flops > 0 and outer.flops == 0 and not flops.active()


def test_generation_counts_the_prefill_and_every_generated_token(tiny):
    with flops.counting() as count:
        flops.add_generation(tiny, prompt_tokens=8, new_tokens=9)
    # 2 N_body per prefilled and per generated token, the head at the 9 generated ones
    assert count.flops == 2 * BODY * 17 + 2 * HEAD * 9


def test_the_loop_logs_the_flops_of_each_step_and_their_total_across_a_resume(make_cfg, tmp_path):
    from tests.conftest import run_and_resume

    common = ["max_steps=4", "save_every=2", "eval.every=2", "algo.batch_size=2", "algo.max_new_tokens=12",
              "eval.num_items=4", "eval.num_samples=2"]
    full, resumed = run_and_resume(make_cfg, tmp_path, common)
    per_step = [full[s]["train/flops"] for s in (1, 2, 3, 4)]
    assert all(f > 0 for f in per_step)
    assert [full[s]["train/flops_total"] for s in (1, 2, 3, 4)] == pytest.approx(
        [sum(per_step[:k]) for k in (1, 2, 3, 4)])
    # resumed from step 2: the same steps, counted on from the checkpoint's total
    for step in (3, 4):
        assert resumed[step]["train/flops"] == full[step]["train/flops"]
        assert resumed[step]["train/flops_total"] == pytest.approx(full[step]["train/flops_total"])
    for d in ("full", "resumed"):
        summary = json.loads((tmp_path / d / "summary.json").read_text())
        assert summary["train_flops"] == pytest.approx(sum(per_step))
