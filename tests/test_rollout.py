"""Joint actions, credit assignment and EOS masking."""

import torch

from magrpo.rollout.record import completion_mask, credit, joint_indices


def test_aligned_joint_actions_pair_same_index():
    assert joint_indices(2, 3, "aligned").tolist() == [[0, 0], [1, 1], [2, 2]]


def test_cross_joint_actions_are_cartesian_product():
    j = joint_indices(2, 2, "cross")
    assert j.tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert joint_indices(3, 2, "cross").shape == (8, 3)


def test_aligned_credit_is_identity():
    r = torch.tensor([[1.0, 2.0, 3.0]])
    joint = joint_indices(2, 3, "aligned")
    for agent in (0, 1):
        assert torch.equal(credit(r, joint, agent, 3), r)


def test_cross_credit_mean_and_sum_on_hand_built_case():
    # G=2, joints (a1,a2): (0,0)=1, (0,1)=3, (1,0)=5, (1,1)=7
    r = torch.tensor([[1.0, 3.0, 5.0, 7.0]])
    joint = joint_indices(2, 2, "cross")
    # agent 1 sample 0 is in joints (0,0),(0,1) -> mean 2, sum 4; sample 1 -> mean 6, sum 12
    assert credit(r, joint, 0, 2, "mean").tolist() == [[2.0, 6.0]]
    assert credit(r, joint, 0, 2, "sum").tolist() == [[4.0, 12.0]]
    # agent 2 sample 0 is in (0,0),(1,0) -> mean 3; sample 1 in (0,1),(1,1) -> mean 5
    assert credit(r, joint, 1, 2, "mean").tolist() == [[3.0, 5.0]]


def test_completion_mask_keeps_first_eos_and_drops_the_rest():
    eos = 9
    ids = torch.tensor([[5, 6, eos, 9, 9], [1, 2, 3, 4, 5], [eos, 3, 3, eos, 3]])
    m = completion_mask(ids, [eos])
    assert m.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]]


def test_completion_mask_handles_several_eos_ids():
    m = completion_mask(torch.tensor([[4, 7, 8, 1]]), [7, 8])
    assert m.tolist() == [[1, 1, 0, 0]]


def test_one_model_writing_the_joint_answer_gets_the_teams_token_budget():
    from magrpo.rollout.record import Sampling, team_budget

    class TwoAgentTask:
        num_agents = 2

    s = Sampling(num_generations=4, max_new_tokens=24)
    assert team_budget(s, TwoAgentTask(), 1).max_new_tokens == 48     # grpo, ppo, the single baseline
    assert team_budget(s, TwoAgentTask(), 2).max_new_tokens == 24     # each agent of the team
    assert s.max_new_tokens == 24                                      # the caller's sampling is untouched


def test_every_prompting_baseline_is_a_scheme():
    """The baselines are declared once (paper_grid.PROMPTING) and each names a registered scheme."""
    from magrpo.launch.paper_grid import PROMPTING
    from magrpo.rollout.record import BASELINES, SCHEMES

    assert BASELINES == list(PROMPTING) and set(PROMPTING) <= set(SCHEMES)
