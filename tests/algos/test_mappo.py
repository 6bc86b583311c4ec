"""MAPPO's team critic (algo.critic_view=joint / others_first): its values checked by hand against a
plain forward of the joint text, what each view reads, and how it trains (magrpo/algos/mappo.py)."""

import pytest
import torch

from magrpo.algos.base import StepInput
from magrpo.config.schemas import ConfigError
from magrpo.validation.checks import validate
from tests.conftest import build_algorithm

FAST = ["algo.max_new_tokens=12", "eval.num_items=2", "eval.num_samples=2", "algo.batch_size=2"]
TEAM = ["algo=mappo", "algo.critic=model"]
EPS32 = torch.finfo(torch.float32).eps


def _episode(make_cfg, view: str, extra: list[str] = ()):
    cfg, agents, task, algo = build_algorithm(make_cfg, [*TEAM, f"algo.critic_view={view}", *FAST, *extra])
    ep = algo.collect(StepInput(task.load("train")[:2]))
    return cfg, agents, algo, ep


def _randomize_heads(algo) -> None:
    """Non-zero, different heads (a fresh head is 0 everywhere), so a value read at a wrong
    position or by a wrong head would differ by the size of the values themselves."""
    torch.manual_seed(7)
    with torch.no_grad():
        for head in algo.critics[0].heads:
            head.v.weight.normal_()
            head.v.bias.normal_()


def _answer_ids(gen, r: int) -> list[int]:
    return gen.completion_ids[r, :int(gen.completion_mask[r].sum())].tolist()


def test_the_joint_critics_values_equal_a_plain_forward_of_the_joint_text_by_hand(make_cfg):
    """V_i(s_t) = w_i . h_t + b_i, with h_t the backbone's last hidden state before agent i's token t
    in ONE plain forward of the joint action's whole text, written here from the documented layout
    (every prompt, then `\\n[1] ` answer_1 `\\n[2] ` answer_2), with no prefix sharing, no padding
    and no gather; the head's dot product is summed here in float64.

    Tolerance, from the arithmetic: both sides compute the same function in float32 and differ
    only in the order of additions (the prompts run once per item and their key/value cache is
    gathered to the rows, rows are padded into one batch, the attention kernels split the sums
    differently). Each reordered sum moves by at most about EPS32 of the magnitudes it adds, and
    the hidden states leave a normalisation, so h moves by a few EPS32 per layer relative to its
    size; the head then adds H = 64 products w_k h_k. We allow 2^6 EPS32 (7.6e-6) of the size of
    those products, sum_k |w_k h_k| + |b|: a few EPS32 for each of the 2 layers and the 64 terms,
    with room for another CPU's kernels (measured here: 0.65 EPS32 at most). A value read one
    position off, or by the other agent's head, is off by more than 2^14 EPS32 of that size
    (asserted below: the check can fail)."""
    cfg, agents, algo, ep = _episode(make_cfg, "joint")
    _randomize_heads(algo)
    critic, tok = algo.critics[0], algo.critics[0].tokenizer
    reads = algo.team_reads(ep)
    lv = ep.root
    widths = {p: lv.samples[p].completion_ids.shape[1] for p in range(2)}
    got = algo._team_values(reads, widths)
    prompts = lv.prompts
    checked, worst, off_by_one, other_head = 0, 0.0, 0.0, 0.0
    for node in range(lv.num_items * lv.num_joint):
        answers = [_answer_ids(lv.samples[j], lv.row(j, node)) for j in range(2)]
        ids = tok("\n\n".join(f"[Agent {j + 1}] task:\n{prompts[node][j].strip()}" for j in range(2)),
                  add_special_tokens=False).input_ids
        starts = []
        for j in range(2):
            ids += tok(f"\n[{j + 1}] ", add_special_tokens=False).input_ids
            starts.append(len(ids))
            ids += answers[j]
        with torch.no_grad():
            h = critic.backbone(input_ids=torch.tensor([ids])).last_hidden_state[0].double()   # [L, H]
        heads = [(hd.v.weight[0].detach().double(), hd.v.bias[0].detach().double()) for hd in critic.heads]
        for i in range(2):
            r = lv.row(i, node)            # aligned: agent i's completion row of this joint action
            (w, b), (w2, b2) = heads[i], heads[1 - i]
            for t in range(len(answers[i])):
                state = h[starts[i] + t - 1]               # the position just before answer token t
                want = (w * state).sum() + b
                scale = (w * state).abs().sum() + b.abs()
                error = abs(float(got[i][r, t]) - float(want)) / float(scale)
                assert error <= 2 ** 6 * EPS32, (i, r, t, error)
                worst = max(worst, error)
                # what a wrong read would give: the next position's state, the other agent's head
                off_by_one = max(off_by_one, abs(float(got[i][r, t]) - float((w * h[starts[i] + t]).sum() + b)) / float(scale))
                other_head = max(other_head, abs(float(got[i][r, t]) - float((w2 * state).sum() + b2)) / float(scale))
                checked += 1
    assert checked == sum(int(lv.samples[i].completion_mask.sum()) for i in range(2))
    # the check can fail: either wrong read is off by far more than the tolerance
    assert min(off_by_one, other_head) > 2 ** 14 * EPS32 > 2 ** 6 * EPS32 > worst


def test_a_causal_joint_critic_gives_agent_1_values_that_do_not_read_agent_2s_answer(make_cfg):
    """In the joint text agent 1's answer comes before agent 2's: changing agent 2's answer leaves
    agent 1's values as they were and moves agent 2's."""
    cfg, agents, algo, ep = _episode(make_cfg, "joint")
    _randomize_heads(algo)
    lv = ep.root
    widths = {p: lv.samples[p].completion_ids.shape[1] for p in range(2)}
    before = algo._team_values(algo.team_reads(ep), widths)
    gen = lv.samples[1]
    n = int(gen.completion_mask[0].sum())
    gen.completion_ids[0, :n] = (gen.completion_ids[0, :n] + 1) % 100 + 3     # another answer of agent 2
    after = algo._team_values(algo.team_reads(ep), widths)
    r1 = lv.row(0, 0)                     # agent 1's row in joint action 0
    assert torch.allclose(after[0][r1], before[0][r1], atol=1e-5)
    assert not torch.allclose(after[1][0, 1:n], before[1][0, 1:n], atol=1e-3)


def test_others_first_reads_every_other_answer_before_the_agents_own(make_cfg):
    cfg, agents, algo, ep = _episode(make_cfg, "others_first")
    reads = algo.team_reads(ep)
    lv, tok = ep.root, algo.critics[0].tokenizer
    # a text per (joint action, agent): twice joint's
    assert reads.num_rows == 2 * lv.num_items * lv.num_joint
    for i in range(2):
        for r in range(len(reads.row[i])):
            c, start = int(reads.row[i][r]), int(reads.start[i][r])
            tail = reads.text.tail_ids[c][reads.text.tail_mask[c].bool()].tolist()
            own = _answer_ids(lv.samples[i], r)
            other = _answer_ids(lv.samples[1 - i], lv.row(1 - i, r))
            assert tail[start:] == own                                   # its own answer last
            assert tail == tok(f"\n[{2 - i}] ", add_special_tokens=False).input_ids + other \
                + tok(f"\n[{i + 1}] ", add_special_tokens=False).input_ids + own
            assert int(reads.head[i][r]) == i


def test_in_a_chain_each_prompt_stands_before_its_own_agents_answer(make_cfg):
    """Sequential: agent 2's prompt holds agent 1's answer, so the joint text is
    [prompt 1][answer 1][prompt 2][answer 2] and agent 1's values never read its own later tokens."""
    cfg, agents, algo, ep = _episode(make_cfg, "joint", ["algo.topology=sequential"])
    reads = algo.team_reads(ep)
    lv, tok = ep.root, algo.critics[0].tokenizer
    assert reads.num_rows == lv.num_items * lv.num_joint        # one text per joint action
    for node in range(lv.num_items * lv.num_joint):
        c = [int(reads.row[1][r]) for r in range(len(reads.row[1])) if lv.row(1, node) == r][0]
        prefix = tok.decode(reads.text.prefix_ids[reads.text.index[c]][reads.text.prefix_mask[reads.text.index[c]].bool()])
        tail = reads.text.tail_ids[c][reads.text.tail_mask[c].bool()].tolist()
        assert prefix == f"[Agent 1] task:\n{lv.prompts[node][0].strip()}"
        a1, a2 = _answer_ids(lv.samples[0], lv.row(0, node)), _answer_ids(lv.samples[1], lv.row(1, node))
        want = (tok("\n[1] ", add_special_tokens=False).input_ids + a1
                + tok(f"\n\n[Agent 2] task:\n{lv.prompts[node][1].strip()}", add_special_tokens=False).input_ids
                + tok("\n[2] ", add_special_tokens=False).input_ids + a2)
        assert tail == want
    # agent 1's sample s is read in the first joint action that holds it
    for r in range(len(reads.row[0])):
        b, s = divmod(r, lv.per_item(0))
        j0 = int((lv.joint[:, 0] == s).nonzero()[0])
        c = int(reads.row[0][r])
        assert int(reads.row[1][b * lv.per_item(1) + int(lv.joint[j0, 1])]) == c


def test_the_team_critic_trains_apart_from_the_actors(make_cfg):
    """One step: the actors' optimizers hold no critic parameter, the critic's own optimizer steps
    ppo_epochs x num_mini_batches times and moves its backbone and every head, and the step logs the
    critic's metrics and each policy's share of the value loss."""
    cfg, agents, task, algo = build_algorithm(make_cfg, [*TEAM, "algo.critic_view=joint", *FAST])
    critic = algo.critics[0]
    held = {id(p) for opt in algo.optimizers for g in opt.param_groups for p in g["params"]}
    assert not held & {id(p) for p in critic.parameters()}
    steps = []
    algo.critic_optimizers[0].register_step_post_hook(lambda *_: steps.append(1))
    before = [p.detach().clone() for p in critic.parameters()]
    metrics = algo.step(StepInput(task.load("train")[:2]))
    assert len(steps) == cfg.algo.ppo_epochs * cfg.algo.num_mini_batches
    assert all(not torch.equal(a, p) for a, p in zip(before, critic.parameters()))
    for key in ("train/critic/value_loss", "train/critic/grad_norm", "train/agent_1/value_loss",
                "train/agent_2/value_loss", "train/agent_1/explained_variance", "train/agent_1/loss"):
        assert key in metrics, key
    assert metrics["train/critic/value_loss"] > 0


@pytest.mark.parametrize("view", ["joint", "others_first"])
def test_the_team_critic_needs_a_critic_model(make_cfg, view):
    with pytest.raises(ConfigError, match=f"algo.critic='head' is not allowed with algo.critic_view={view}; "
                                          f"choose: model"):
        validate(make_cfg(["algo=mappo", f"algo.critic_view={view}", "algo.critic=head"]))
    with pytest.raises(ConfigError, match="algo.critic_view"):
        validate(make_cfg(["algo=mappo", "algo.critic_view=everyone"]))
