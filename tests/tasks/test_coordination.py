"""The coordination suite's games: moves parsed from text, rewards on hand-computed cases,
individual shares that add up to the team reward, and config checks that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from magrpo.core.instances import select
from magrpo.core.schema import ConfigError
from magrpo.tasks import build_task
from magrpo.validation.checks import validate


def _task(name: str, **task):
    cfg = OmegaConf.create({"name": name, "num_options": 8 if name != "signal" else 4, "num_train": 8,
                            "num_eval": 4, "num_team": 2, "seed": 0, **({"needed": "bdfh"} if name == "cover" else {}),
                            **task})
    return build_task(cfg, OmegaConf.create({"name": name, "shift": 0.0, "scale": 1.0}))


def test_a_move_is_the_first_option_letter_of_the_answer():
    from magrpo.tasks.coordination import pick, picks

    assert pick("  Zebra crossing", "abcd") == "b"         # 'Z' is no option; 'b' comes first
    assert pick("XYZ 123", "abcd") is None
    assert picks("c, then A, then d", "abcd", 4) == ["c", "a", "d", None]


def test_agree_pays_the_share_of_agreeing_pairs():
    task = _task("agree")
    # three agents: a, a, c -> 2 of the 6 ordered pairs agree; all three -> 1; none valid -> 0
    s = task.reward([["p"] * 3] * 3, [["a", "A!", "c"], ["b", "b", "b"], ["x", "1", "z"]])
    assert list(s) == pytest.approx([2 / 6, 1.0, 0.0])
    shares = task.individual_rewards(s, 3)
    assert shares[0] == pytest.approx([1 / 6, 1 / 6, 0.0]) and all(sum(r) == pytest.approx(t) for r, t in zip(shares, s))
    # the single-model form: its first num_team picks
    assert list(task.reward([["p"]] * 2, [["g, g"], ["g, c"]])) == [1.0, 0.0]


def test_cover_pays_each_needed_part_once():
    task = _task("cover")
    # needed b, d: distinct -> 1; the same needed part twice -> 1/2; an unneeded part -> 1/2
    s = task.reward([["p"] * 2] * 3, [["b", "d"], ["d", "d"], ["a", "b"]])
    assert list(s) == pytest.approx([1.0, 0.5, 0.5])
    assert s.components["collisions"] == pytest.approx([0.0, 0.5, 0.0])
    shares = task.individual_rewards(s, 2)
    assert shares == [pytest.approx([0.5, 0.5]), pytest.approx([0.25, 0.25]), pytest.approx([0.0, 0.5])]


def test_signal_pays_the_listener_for_the_object_and_never_a_named_object():
    task = _task("signal")
    assert task.runs() == ["a-g", "h-m", "n-t", "u-z"]          # K = 4: the first letter's run is the move
    target = [it["target"] for it in task.load("train")[:3]]    # 0, 1, 2: moon, tree, bread
    s = task.reward([["p", "q"]] * 3, [["hm", "Apple"], ["the tree!", "1 house"], ["ok", "zebra"]], target=target)
    # right; right but the speaker named an object; wrong (z is star's run, not bread's)
    assert list(s) == [1.0, 0.0, 0.0] and s.components["leaked"] == [0.0, 1.0, 0.0]
    # normalized from chance: guessing (1/4 right) is 0, always right is 1
    assert task.normalized_return(0.25, 2) == 0.0 and task.normalized_return(1.0, 2) == 1.0
    assert task.normalized_return(0.625, 2) == pytest.approx(0.5) and task.normalized_return(0.1, 2) == 0.0


def test_the_listener_hears_only_a_symbol_of_the_speakers_first_letter():
    task = _task("signal")
    item = task.load("train")[0]
    speaker, listener = task.prompts(item, 2)
    assert speaker.endswith("moon") and "moon" not in listener.split("Objects:")[0]
    heard = {m: task.context_prompt(item, 1, listener, None, {0: m}).rsplit("Signal: ", 1)[1]
             for m in ("  apple", "moon", "1 sky", "zz", "???")}
    assert heard == {"  apple": "sky", "moon": "atom", "1 sky": "coral", "zz": "bridge", "???": "-"}


@pytest.mark.parametrize("overrides,message", [
    (["task=agree", "task.num_options=17"], "task.num_options=17"),
    (["task=cover", "task.needed=bz"], "task.needed='bz'"),
    (["task=cover", "agents.num_agents=5"], "accepts 1 to 4"),
    (["task=signal", "agents.num_agents=3"], "accepts 1 or 2"),
    (["task=agree", "agents.num_agents=9"], "accepts 1 to 8"),
])
def test_a_bad_suite_setting_names_the_key(make_cfg, overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        validate(make_cfg(overrides))


def test_individual_reward_is_refused_where_the_reward_does_not_split(make_cfg):
    with pytest.raises(ConfigError, match="algo.reward='individual' is not allowed for task 'signal'"):
        validate(make_cfg(["task=signal", "algo=ippo", "algo.reward=individual"]))
    validate(make_cfg(["task=cover", "algo=ippo", "algo.reward=individual"]))


def test_the_coordination_table_plays_every_game_and_skips_what_a_game_does_not_allow():
    """Each (game, row) composes and runs the game's default run: tests/test_paper.py
    (test_every_paper_config_composes_at_both_scales)."""
    from magrpo.cli.paper import cells

    have = cells("coordination", "train")
    assert {task for task, _ in have} == {"agree", "cover", "signal", "convention", "stag_hunt", "budget_signal",
                                          "invest", "crowd"}
    for skipped in (("signal", "ippo_individual"), ("budget_signal", "maac"), ("crowd", "c3"), ("invest", "c3")):
        assert skipped not in have
    assert ("crowd", "maac") in have and ("invest", "iac") in have


def test_the_coordination_table_renders_the_suites_rows_and_columns(tmp_path):
    """A trained row and the untrained row of `cover`, through the paper layout: the game's own
    columns (covered, collisions), not the other games'."""
    from magrpo.cli.evaluate import run_eval
    from magrpo.cli.train import run
    from magrpo.table import main as table_main
    from tests.conftest import compose_cfg
    from tests.test_paper import md_table

    sweep = tmp_path / "sweep"
    run(compose_cfg([f"output_dir={sweep / 'train' / '0'}", "recipe=cover", "method=magrpo", "max_steps=2",
                     "eval.every=0", "eval.num_items=2"]))
    run_eval(compose_cfg([f"output_dir={sweep / 'eval' / '0'}", "recipe=cover", "method=untrained",
                          "eval.num_items=2"], config_name="eval"))
    assert table_main([str(sweep), "--layout", "paper", "--no-plots"]) == 0
    header, rows = md_table(sweep / "table" / "table.md", "### cover (coordination)")
    assert list(rows) == ["Untrained team", "MAGRPO"]
    assert "covered" in header and "collisions" in header and "agreement (pairs)" not in header


# -- every suite task runs its default run (conf/default_run/<task>.yaml) --------------------------

SUITE = ["agree", "cover", "signal", "convention", "stag_hunt", "budget_signal", "invest", "crowd"]
DEFAULT_RUNS = [*SUITE, "lever"]         # the benchmark's games and the zero-shot coordination game


@pytest.mark.parametrize("task", DEFAULT_RUNS)
def test_task_alone_runs_its_default_run_and_smoke_caps_it(make_cfg, task):
    import yaml

    from magrpo.config.schemas import CONF_DIR

    run = yaml.safe_load((Path(CONF_DIR) / "default_run" / f"{task}.yaml").read_text())
    cfg = validate(make_cfg([f"task={task}"]))
    assert cfg.max_steps == run["max_steps"] and cfg.optimizer.lr == run["optimizer"]["lr"]
    assert cfg.algo.num_generations == run["algo"]["num_generations"] and cfg.eval.every == run["eval"]["every"]
    smoke = validate(make_cfg([f"task={task}", "debug=smoke"]))
    assert smoke.max_steps == 2 and smoke.algo.batch_size == 2
    mine = validate(make_cfg([f"task={task}", "max_steps=7", "optimizer.lr=0.01"]))
    assert mine.max_steps == 7 and mine.optimizer.lr == 0.01          # the command line wins


def test_every_default_run_belongs_to_a_registered_task_and_the_others_keep_the_generic_defaults(make_cfg):
    from magrpo.config.schemas import CONF_DIR
    from magrpo.tasks import TASKS

    assert sorted(p.stem for p in (Path(CONF_DIR) / "default_run").glob("*.yaml")) == sorted(DEFAULT_RUNS)
    assert set(DEFAULT_RUNS) <= set(TASKS)
    generic = validate(make_cfg(["task=length_ratio"]))
    assert generic.max_steps == 120 and generic.algo.num_generations == 4
    assert validate(make_cfg(["task=tldr"])).max_steps == 120      # the paper tasks: recipe=tldr is their run


def test_recipe_runs_the_same_values_as_the_default_run(make_cfg):
    a = validate(make_cfg(["task=cover"]))
    b = validate(make_cfg(["recipe=cover", "method=magrpo"]))
    for key in ("max_steps", "optimizer.lr", "algo.num_generations", "algo.max_new_tokens", "eval.every",
                "eval.num_samples"):
        assert select(a, key) == select(b, key), key


def test_a_row_takes_signals_keys_then_budget_signals_own(make_cfg):
    """recipe=budget_signal stacks conf/method/task/signal/<row>.yaml, then budget_signal/<row>.yaml:
    IPPO gets signal's entropy bonus and its own positive signalling; a row without a file gets neither."""
    ippo = validate(make_cfg(["recipe=budget_signal", "method=ippo"]))
    assert ippo.algo.ent_coef == 0.01 and ippo.algo.signal_bonus == 0.3 and ippo.algo.signal_agents is None
    assert validate(make_cfg(["recipe=signal", "method=ippo"])).algo.signal_bonus == 0.0
    for row in ("magrpo", "mappo", "iac", "c3"):      # iac and c3 would refuse the bonus at start-up
        assert validate(make_cfg(["recipe=budget_signal", f"method={row}"])).algo.signal_bonus == 0.0
    mine = validate(make_cfg(["recipe=budget_signal", "method=ippo", "algo.signal_bonus=0"]))
    assert mine.algo.signal_bonus == 0.0                # the command line wins
