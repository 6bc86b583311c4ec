"""C3 (magrpo/algos/c3.py): leave-one-out credit on counterfactual alternatives, its cost, its keys."""

import torch

from magrpo.algos.advantages import advantages
from magrpo.algos.c3 import counterfactual_rollouts
from magrpo.cli.train import run
from magrpo.rollout.record import Sampling
from tests.algos import FAST
from tests.conftest import build_algorithm, run_cli, train_rows

# --- C3 ------------------------------------------------------------------------------------------


def test_c3_leave_one_out_on_three_alternatives():
    R = torch.tensor([[1.0, 2.0, 6.0]])
    # A_k = R_k - mean of the other two: 1 - 4, 2 - 3.5, 6 - 1.5
    assert advantages(R, "rloo").tolist() == [[-3.0, -1.5, 4.5]]


def test_c3_freezes_the_context_and_replays_a_fixed_continuation(make_cfg):
    cfg, agents, task, algo = build_algorithm(make_cfg, ["algo=c3", "task=agree", "agents.num_agents=3", *FAST,
                                                "algo.num_generations=3"])
    items = task.load("train")[:2]
    decisions, generated = counterfactual_rollouts(agents, task, items, Sampling(3, 4))
    assert [d.joint.tolist() for d in decisions] == [[[0, 0, 0], [1, 1, 1], [2, 2, 2]],
                                                      [[0, 0, 0], [0, 1, 1], [0, 2, 2]],
                                                      [[0, 0, 0], [0, 0, 1], [0, 0, 2]]]
    # cost: K * N (N + 1) / 2 = 3 * 6 = 18 sequences per item
    assert sum(len(g.texts) for g in generated) == 18 * len(items)
    for i in (1, 2):       # decision i's context: every earlier agent's first alternative
        for j in range(i):
            first = decisions[j].samples[j].texts[::3]
            assert decisions[i].samples[j].texts == first
            for b, prompt in enumerate(decisions[i].samples[i].prompts):
                assert first[b].strip() in prompt
    # a fixed continuation: greedy, so the same context and alternative give the same answer
    again = counterfactual_rollouts(agents, task, items, Sampling(3, 4, do_sample=False))[0][0]
    assert again.samples[0].texts[0] == again.samples[0].texts[1]      # identical alternatives...
    assert again.samples[1].texts[0] == again.samples[1].texts[1]      # ...are continued identically
    assert decisions[0].samples[2].num_generations == 1


def test_c3_logs_its_cost(make_cfg, tmp_path):
    out = tmp_path / "c3"
    run(make_cfg(["algo=c3", "task=agree", "max_steps=1", "eval.every=0", "save_final=false", *FAST],
                 out=str(out)))
    row = train_rows(out)[1]
    assert row["train/sequences_per_item"] == 2 * 3            # K N (N + 1) / 2 with K = N = 2
    assert "train/c3/decision_2/reward_mean" in row


def test_c3_has_no_key_of_magrpos_it_does_not_use(tmp_path, capsys):
    """C3 draws its own alternatives: MAGRPO's dynamic sampling, overlong penalty and cross credit are
    not keys of algo=c3, so setting one is an unknown key that lists C3's keys."""
    from magrpo.cli.train import main

    code = run_cli(main, "magrpo-train", ["algo=c3", "algo.dynamic_sampling=true", f"hydra.run.dir={tmp_path}"])
    err = capsys.readouterr().err
    assert code == 2 and "unknown config key 'algo.dynamic_sampling'" in err, err
    allowed = set(err.split("keys allowed in algo: ")[1].strip().split(", "))
    assert {"advantage", "num_iterations", "epsilon_high", "loss", "loss_agg", "topology"} <= allowed, err
    assert not {"dynamic_sampling", "overlong_penalty", "cross_credit"} & allowed, err
