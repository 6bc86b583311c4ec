"""Zero-shot coordination: declared symmetries, Other-Play's relabelled views, the lever game, and
training with frozen partners (magrpo.tasks.symmetry, magrpo.team.partners)."""

from __future__ import annotations

import json
import random

import pytest
import torch
from omegaconf import OmegaConf

from magrpo.core.schema import ConfigError
from magrpo.tasks import TASKS
from magrpo.tasks.check import check_task
from magrpo.tasks.symmetry import VIEW_KEY, Symmetry, other_play
from tests.conftest import compose_cfg


def _task(name: str, **cfg):
    cls = TASKS[name]
    c = cls.config_schema(**cfg)
    return cls(c, cls.reward_schema())


# -- symmetries ------------------------------------------------------------------------------------


def test_a_relabelling_by_hand():
    words = Symmetry("colours", ("red", "blue", "gold"), "word", "prompts")
    perm = ("blue", "red", "gold")                     # red <-> blue, all at once
    assert words.apply("Red, blue or REDS? RED and bluebird; gold.", perm) == "Blue, red or REDS? BLUE and bluebird; gold."
    assert words.inverse(("blue", "gold", "red")) == ("gold", "red", "blue")
    text = "red then blue then gold"
    cycle = ("blue", "gold", "red")
    assert words.apply(words.apply(text, cycle), words.inverse(cycle)) == text
    letters = Symmetry("options", tuple("abc"), "letter", "answers")
    assert letters.apply("A cab!", ("c", "a", "b")) == "C bca!"
    assert words.acts("prompt") and not words.acts("answer") and letters.acts("answer")


@pytest.mark.parametrize("args, needle", [
    (("x", ("a",), "letter", "answers"), "at least 2 distinct"),
    (("x", ("a", "A"), "letter", "answers"), "at least 2 distinct"),
    (("x", ("ab", "c"), "letter", "answers"), "single letters"),
    (("x", ("a", "b"), "letter", "both"), "acts on answers only"),
    (("x", ("a", "b"), "glyph", "both"), "unit='glyph'"),
    (("x", ("a", "b"), "word", "tokens"), "acts_on='tokens'"),
])
def test_a_bad_symmetry_is_refused_naming_what_is_wrong(args, needle):
    with pytest.raises(ValueError, match=needle):
        Symmetry(*args)


def test_other_play_reads_a_partners_answer_back_through_its_view():
    """agree, 4 options: agent 2 sees the game with a <-> b swapped. It answers "b" in its view,
    which is "a" in the game's labels: with agent 1's "a" that is agreement (reward 1), where the
    same answers without a view disagree (reward 0)."""
    task = other_play(_task("agree", num_options=4))
    item = task.load("train")[0]
    plain = task.score([item], [task.prompts(item, 2)], [["a", "b"]])
    assert list(plain) == [0.0]
    viewed = {**item, VIEW_KEY: [None, [("b", "a", "c", "d")]]}
    assert task.prompts(viewed, 2) == task.prompts(item, 2)        # letters act on answers only
    assert list(task.score([viewed], [task.prompts(viewed, 2)], [["a", "b"]])) == [1.0]
    assert list(task.score([viewed], [task.prompts(viewed, 2)], [["a", "a"]])) == [0.0]


def test_other_play_relabels_what_a_partner_reads():
    """convention: the colour names of agent 2's listing are permuted; agent 1's are as they are."""
    task = other_play(_task("convention"))
    item = task.load("train")[0]
    perm = ("blue", "green", "gold", "red")            # red->blue, blue->green, green->gold, gold->red
    viewed = {**item, VIEW_KEY: [None, [perm]]}
    mine, theirs = task.prompts(viewed, 2)
    base = task.prompts(item, 2)
    assert mine == base[0]
    expected = base[1]
    for src, dst in zip(("red", "blue", "green", "gold"), perm):
        expected = expected.replace(f"={src}", f"=<{dst}>")
    assert theirs == expected.replace("<", "").replace(">", "")
    # signal: the listener reads the speaker's symbol under its own names
    sig = other_play(_task("signal"))
    it = {**sig.load("train")[0], VIEW_KEY: [None, [("atom", "sky")]]}
    speaker_says = "apple"                                # first letter a: the symbol "sky"
    assert sig.context_prompt(it, 1, sig.prompts(it, 2)[1], None, {0: speaker_says}).endswith("Signal: atom")
    assert sig.context_prompt(sig.load("train")[0], 1, sig.prompts(it, 2)[1], None, {0: speaker_says}).endswith(
        "Signal: sky")


def test_an_item_without_a_view_plays_the_game_as_it_is():
    plain, wrapped = _task("lever"), other_play(_task("lever"))
    items = plain.load("eval")[:3]
    answers = [["a", "a"], ["b", "c"], ["d", "d"]]
    prompts = [plain.prompts(it, 2) for it in items]
    assert list(wrapped.score(items, prompts, answers)) == list(plain.score(items, prompts, answers))


def test_check_task_refuses_a_symmetry_that_changes_the_reward():
    from magrpo.tasks.coordination import CoverTask

    class CoverWithParts(CoverTask):
        """cover's needed parts are not interchangeable with the others: not a symmetry."""

        def symmetries(self):
            return (Symmetry("parts", tuple(self.labels), "letter", "answers"),)

    report = check_task(CoverWithParts)
    assert not report.ok
    assert any("symmetry 'parts' changes the reward" in p for p in report.problems), report.problems
    for name in ("agree", "convention", "signal", "budget_signal", "lever"):
        assert check_task(name).ok, name
        assert _task(name).symmetries(), name


# -- the lever game ----------------------------------------------------------------------------------


def test_the_lever_game_by_hand():
    """K = 5: an answer's first letter pulls lever (position mod 5) + 1: a, f, k ... lever 1 (0.9);
    b, g, l ... lever 2; e, j, o ... lever 5 (each of 2 to 5 pays 1)."""
    task = _task("lever", num_options=5)
    assert [task.move(w) for w in ("apple", "Fig", "banana", "grape", "echo", "Joy", "4", "")] == \
        [0, 0, 1, 1, 4, 4, None, None]
    item = task.load("train")[0]
    prompts = [task.prompts(item, 2)] * 5
    s = task.score([item] * 5, prompts, [["apple", "kite"], ["bee", "lamp"], ["bee", "cat"], ["apple", ""],
                                         ["joy", "Echo"]])
    assert list(s) == pytest.approx([0.9, 1.0, 0.0, 0.0, 1.0])
    assert s.components["odd_lever"] == pytest.approx([1.0, 0.0, 0.0, 0.5, 0.0])
    assert task.individual_rewards(s, 2)[0] == pytest.approx([0.45, 0.45])
    # relabelling lever 2 <-> lever 3 (symbols b <-> c) moves the first letter of every word by one
    # lever, within the alphabet; lever 1 and the rest stay
    sym = task.symmetries()[0]
    assert sym.symbols == ("b", "c", "d", "e")
    perm = ("c", "b", "d", "e")
    assert task.relabel("Bee lamp, apple 4x", sym, perm, "answer") == "Cee mamp, apple 4x"
    assert task.relabel("x-ray vex Wq", sym, perm, "answer") == "x-ray wex Vq"     # x: lever 4, stays
    four = _task("lever", num_options=4)                 # z is lever 2 of 4; lever 4's letter past it is x
    assert four.relabel("zoo", four.symmetries()[0], ("d", "c", "b"), "answer") == "xoo"


# -- configuration -----------------------------------------------------------------------------------


@pytest.mark.parametrize("overrides, needle", [
    (["task=cover", "algo.other_play=true"], "declares no symmetry"),
    (["task=agree", "algo=grpo", "algo.other_play=true"], "team of 1 agent"),
    (["task=agree", "algo=grpo", "partners=[x]"], "no role for a partner"),
    (["task=agree", "partners=[x]", "partner_roles=[3]"], "partner_roles=[3]"),
    (["task=agree", "partners=[x]", "partner_roles=[1,2]"], "leaving at least one role"),
    (["task=agree", "partner_roles=[2]"], "without partners"),
    (["task=agree", "partners=[x]", "partner_sampling=often"], "partner_sampling"),
])
def test_bad_zsc_keys_are_one_line_config_errors(overrides, needle, tmp_path):
    from magrpo.validation.checks import validate

    with pytest.raises(ConfigError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        validate(compose_cfg([f"output_dir={tmp_path}", "debug=smoke", *overrides]))


# -- training ------------------------------------------------------------------------------------------


SMALL = ["debug=smoke", "task=lever", "eval.num_items=2", "eval.num_samples=1"]


@pytest.fixture(scope="module")
def partner_runs(tmp_path_factory):
    from magrpo.cli.train import run

    root = tmp_path_factory.mktemp("partners")
    for s in (1, 2):
        run(compose_cfg([f"output_dir={root / f's{s}'}", *SMALL, f"seed={s}", "max_steps=2"]))
    return [root / "s1", root / "s2"]


def _state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_partners_stay_frozen_and_fill_their_roles_as_configured(partner_runs, tmp_path):
    from magrpo.team.team import Team
    from magrpo.training.trainer import Trainer
    from magrpo.validation.checks import validate

    cfg = validate(compose_cfg([f"output_dir={tmp_path / 'fcp'}", *SMALL, "max_steps=4", "logger.log_every=1",
                                f"partners=[{partner_runs[0]},{partner_runs[1]}]", "partner_roles=[2]",
                                "partner_sampling=cycle"]))
    trainer = Trainer(cfg, tmp_path / "fcp")
    partners = [m.agents for m in trainer.partners.members]
    before = [[_state(a.model) for a in agents] for agents in partners]
    own_before = [_state(a.model) for a in trainer.agents]
    assert all(not p.requires_grad for agents in partners for a in agents for p in a.model.parameters())
    trainer.fit()
    for agents, states in zip(partners, before):                # bit-identical after 4 updates
        for a, state in zip(agents, states):
            assert all(torch.equal(v, a.model.state_dict()[k]) for k, v in state.items())
    # role 2 is always a partner's: the team's own agent 2 never trains; agent 1 does
    assert all(torch.equal(v, trainer.agents[1].model.state_dict()[k]) for k, v in own_before[1].items())
    assert not all(torch.equal(v, trainer.agents[0].model.state_dict()[k]) for k, v in own_before[0].items())
    rows = [json.loads(x) for x in (tmp_path / "fcp" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "partners/member" in r]
    assert [r["partners/member"] for r in steps] == [0.0, 1.0, 0.0, 1.0]           # cycle
    assert all(r.get("partners/role_2") == 1.0 and "partners/role_1" not in r for r in steps)
    # the partners' own runs are as they were: they load to the same weights
    again = Team.from_run(partner_runs[0])
    assert all(torch.equal(v, again.agents[0].model.state_dict()[k]) for k, v in before[0][0].items())


def test_drawn_partners_and_roles_follow_the_seed(partner_runs, tmp_path):
    from magrpo.team.partners import PartnerPool

    pool = PartnerPool([str(p) for p in partner_runs], None, "uniform", 2, "lever", "cpu", seed=3)
    draws = [pool.draw(step) for step in range(40)]
    assert draws == [pool.draw(step) for step in range(40)]                        # seeded: a resume draws the same
    assert {m for m, _ in draws} == {0, 1} and {r for _, (r,) in draws} == {0, 1}  # both members, both roles
    rng = random.Random("partners/3/7")
    assert draws[7] == (rng.randrange(2), (rng.randrange(2),))
    with pytest.raises(ConfigError, match="team of 2 agent.*has 3"):
        PartnerPool([str(partner_runs[0])], None, "uniform", 3, "lever", "cpu", seed=0)


def test_other_play_trains_and_its_views_are_drawn_per_step(tmp_path):
    from magrpo.training.trainer import Trainer
    from magrpo.validation.checks import validate

    cfg = validate(compose_cfg([f"output_dir={tmp_path / 'op'}", *SMALL, "algo.other_play=true"]))
    trainer = Trainer(cfg, tmp_path / "op")
    items = trainer.train_items[:3]
    first = trainer.views(items)
    assert first == trainer.views(items)                       # the same step and seed: the same views
    assert all(v[VIEW_KEY][0] is None and len(v[VIEW_KEY]) == 2 for v in first)
    assert VIEW_KEY not in items[0]                            # the data set itself is untouched
    trainer.step = 1
    assert [v[VIEW_KEY] for v in trainer.views(items)] != [v[VIEW_KEY] for v in first]
    result = trainer.fit()
    assert result["steps"] == 2


def test_the_diversity_mixture_by_hand():
    from magrpo.algos.diversity import mixture_nll

    # two members, two answers: the first is 0.5 and 0.1 likely under them (mixture 0.3), the second 0.1 under both
    logps = torch.log(torch.tensor([[0.5, 0.1], [0.1, 0.1]]))
    assert torch.allclose(mixture_nll(logps), -torch.log(torch.tensor([0.3, 0.1])), atol=1e-6)
    assert torch.allclose(mixture_nll(logps[:1]), -logps[0], atol=1e-6)          # one member: its own nll
    with pytest.raises(ValueError, match=r"\[J, n\]"):
        mixture_nll(torch.zeros(3))


def _sequence_logp(model, gen, row: int, temperature: float) -> float:
    """log pi(completion | prompt) of one row by one plain forward of prompt + completion."""
    p_ids, p_mask = gen.prompt_ids[row // gen.num_generations], gen.prompt_mask[row // gen.num_generations]
    c_ids, c_mask = gen.completion_ids[row], gen.completion_mask[row]
    ids = torch.cat([p_ids, c_ids]).unsqueeze(0)
    mask = torch.cat([p_mask.long(), torch.ones_like(c_ids)]).unsqueeze(0)
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[0].float() / temperature
    P = p_ids.shape[0]
    logp = torch.log_softmax(logits[P - 1:P - 1 + c_ids.shape[0]], -1).gather(-1, c_ids.unsqueeze(-1)).squeeze(-1)
    return float((logp * c_mask.float()).sum())


def test_the_diversity_term_is_the_mixtures_nll_of_each_answer_added_to_its_return(partner_runs, tmp_path):
    import math

    from magrpo.training.trainer import Trainer
    from magrpo.validation.checks import validate

    cfg = validate(compose_cfg([f"output_dir={tmp_path / 'div'}", *SMALL, "diversity_coef=0.5",
                                f"diversity=[{partner_runs[0]},{partner_runs[1]}]"]))
    trainer = Trainer(cfg, tmp_path / "div")
    div = trainer.diversity
    assert div.coef == 0.5 and len(div.members) == 2
    ep = trainer.algo.collect(trainer.step_input(trainer.train_items[:2]))
    with_term = ep.returns(0, 1.0)
    ep.diversity = None
    without = ep.returns(0, 1.0)
    gen = ep.root.samples[0]
    want = []
    for row in range(gen.completion_ids.shape[0]):
        ll = [_sequence_logp(agents[0].model, gen, row, div.temperature) for agents in div.members]
        want.append(-math.log(sum(math.exp(x) for x in ll) / len(ll)))
    got = (with_term[0] - without[0]).flatten() / 0.5
    assert torch.allclose(got, torch.tensor(want), atol=1e-4), (got, want)
    assert ep.metrics["train/agent_1/diversity_nll"] == pytest.approx(sum(want) / len(want), abs=1e-4)


def test_a_member_trained_with_the_diversity_term_leaves_the_earlier_ones_as_they_were(partner_runs, tmp_path):
    from magrpo.cli.train import run
    from magrpo.team.team import Team

    before = Team.from_run(partner_runs[0])
    run(compose_cfg([f"output_dir={tmp_path / 'div'}", *SMALL, "logger.log_every=1",
                     f"diversity=[{partner_runs[0]}]"]))
    rows = [json.loads(x) for x in (tmp_path / "div" / "metrics.jsonl").read_text().splitlines()]
    nll = [r["train/agent_2/diversity_nll"] for r in rows if "train/agent_2/diversity_nll" in r]
    assert len(nll) == 2 and all(v > 0 for v in nll)
    after = Team.from_run(partner_runs[0])
    for a, b in zip(before.agents, after.agents):
        assert all(torch.equal(v, b.model.state_dict()[k]) for k, v in a.model.state_dict().items())


def test_the_diversity_term_on_an_algorithm_that_cannot_read_it_is_one_config_error(partner_runs, tmp_path):
    from magrpo.validation.checks import validate

    with pytest.raises(ConfigError, match=r"diversity: algo.name=iac does not read .*allowed with: .*magrpo"):
        validate(compose_cfg([f"output_dir={tmp_path}", *SMALL, "algo=iac", f"diversity=[{partner_runs[0]}]"]))
    with pytest.raises(ConfigError, match=r"diversity_coef"):
        validate(compose_cfg([f"output_dir={tmp_path}", *SMALL, "diversity_coef=-1"]))


def test_a_population_in_one_command_and_fcp_on_it(tmp_path, capsys):
    """magrpo-population trains one member per seed, keeps their checkpoints and writes the manifest
    that partners=[DIR] reads."""
    from magrpo.cli.population import main as population_main
    from magrpo.team.partners import expand

    out = tmp_path / "pop"
    assert population_main(["--out", str(out), "--size", "2", "--first-seed", "3", "--save-every", "1",
                            "--diversity", "0.3", "task=lever", "debug=smoke", "eval.num_items=2"]) == 0
    manifest = json.loads((out / "population.json").read_text())
    assert manifest["complete"] and [m["seed"] for m in manifest["members"]] == [3, 4]
    assert manifest["diversity"] == 0.3
    # the first member trains alone; the second with the diversity term against the first
    first, second = (OmegaConf.load(out / f"seed_{s}" / ".hydra" / "config.yaml") for s in (3, 4))
    assert list(first.diversity) == [] and list(second.diversity) == [str(out / "seed_3")]
    assert second.diversity_coef == 0.3
    rows = (out / "seed_4" / "metrics.jsonl").read_text()
    assert "train/agent_1/diversity_nll" in rows and "diversity_nll" not in (out / "seed_3" / "metrics.jsonl").read_text()
    assert manifest["members"][0]["checkpoints"] == ["seed_3/checkpoints/step_1", "seed_3/checkpoints/step_2"]
    assert len(expand([str(out)])) == 4 and all((out / c).is_dir() for m in manifest["members"]
                                                for c in m["checkpoints"])
    capsys.readouterr()
    assert population_main(["--out", str(out), "--size", "2", "task=lever"]) == 2          # one population per dir
    assert population_main(["--out", str(tmp_path / "p2"), "--size", "2", "seed=4"]) == 2   # set per member
    assert "seed=4" in capsys.readouterr().err
    assert population_main(["--out", str(tmp_path / "p3"), "--size", "2", "diversity=[x]"]) == 2
    assert population_main(["--out", str(tmp_path / "p3"), "--size", "2", "--diversity", "-1"]) == 2
    assert "--diversity -1.0" in capsys.readouterr().err
    # a manifest naming a checkpoint outside its own directory is refused
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "population.json").write_text(json.dumps({"members": [{"checkpoints": ["../pop/seed_3"]}]}))
    with pytest.raises(ConfigError, match="outside the population's directory"):
        expand([str(bad)])
