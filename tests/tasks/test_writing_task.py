"""The tldr and arxiv tasks around the reward: data sources, prompts, single-agent splitting,
metrics, configs and `score_pairs`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from magrpo.tasks import build_task
from magrpo.tasks.data import DataUnavailableError
from magrpo.tasks.writing import SPLIT_MARKER, joint_answer, score_pair, score_pairs, split_single_answer
from magrpo.tasks.writing.data import ArxivTaskConfig, TldrTaskConfig
from magrpo.tasks.writing.reward import ArxivRewardConfig, TldrRewardConfig
from tests.conftest import compose_cfg

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = {"tldr": (TldrTaskConfig, TldrRewardConfig), "arxiv": (ArxivTaskConfig, ArxivRewardConfig)}


def make_task(name: str, **data):
    task_schema, reward_schema = SCHEMAS[name]
    cfg = OmegaConf.merge(OmegaConf.structured(task_schema), {"data": data})
    return build_task(cfg, OmegaConf.structured(reward_schema))


def post(i: int) -> dict:
    return {"prompt": f"SUBREDDIT: r/test\n\nTITLE: post {i}\n\nPOST: body number {i} here.\n\nTL;DR:",
            "completion": f" summary {i}"}


# -- configs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["tldr", "arxiv"])
def test_yaml_files_match_the_schemas(name):
    task_schema, reward_schema = SCHEMAS[name]
    composed = compose_cfg([f"task={name}"])
    for group, schema in (("task", task_schema), ("reward", reward_schema)):
        node = composed[group]
        # Same keys and the same values as the dataclass defaults (score_pairs uses those).
        assert OmegaConf.merge(OmegaConf.structured(schema), node) == OmegaConf.structured(schema)
        assert set(node) == set(OmegaConf.structured(schema))


@pytest.mark.parametrize("name", ["tldr", "arxiv"])
def test_hydra_picks_the_reward_of_the_task(make_cfg, name):
    from magrpo.validation.checks import validate

    cfg = validate(make_cfg([f"task={name}", "reward.scale=2.0"]))
    assert cfg.task.name == cfg.reward.name == name
    assert cfg.reward.jaccard_cap == {"tldr": 0.03, "arxiv": 0.23}[name]
    task = build_task(cfg.task, cfg.reward)
    assert task.num_agents == 2 and task.reward_cfg.scale == 2.0


# -- data ------------------------------------------------------------------------------------
def _words(s: str) -> int:
    return len(s.split())


def test_builtin_sets():
    tldr, arxiv = make_task("tldr"), make_task("arxiv")
    for task, lo, hi in ((tldr, 120, 250), (arxiv, 150, 220)):
        train, evals = task.load("train"), task.load("eval")
        assert (len(train), len(evals)) == (32, 16)
        ids = [it["id"] for it in train + evals]
        assert len(set(ids)) == 48 and len({it["text"] for it in train + evals}) == 48
        for it in train + evals:
            body = it["text"].split("POST:", 1)[-1].replace("TL;DR:", "")
            assert lo <= _words(body) <= hi, it["id"]
    for it in tldr.load("eval"):
        assert it["text"].startswith("SUBREDDIT: r/") and it["text"].endswith("TL;DR:")
        # One-sentence reference TL;DR in the hub's format (leading space).
        assert it["completion"].startswith(" ") and it["reference"] == it["completion"].strip()
        assert len(re.findall(r"[.!?](\s|$)", it["reference"])) == 1
    assert all(it["reference"] is None and it["article_id"] for it in arxiv.load("train"))
    sizes = sum((ROOT / "magrpo/tasks/writing" / f).stat().st_size
                for f in ("builtin_tldr.jsonl", "builtin_arxiv.jsonl", "lexicon.json"))
    assert sizes < 200_000


def test_builtin_split_and_limit_are_configurable():
    task = make_task("tldr", builtin_train_split="train[:40]", builtin_eval_split="train[40:]", limit=5)
    assert len(task.load("train")) == 5 and len(task.load("eval")) == 5
    assert task.load("eval")[0]["reference"] == make_task("tldr").load("eval")[8]["reference"]


def test_local_jsonl_parquet_and_saved_dir(tmp_path):
    import datasets

    rows = [post(i) for i in range(6)]
    jsonl = tmp_path / "tldr.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    parquet = tmp_path / "tldr.parquet"
    datasets.Dataset.from_list(rows).to_parquet(str(parquet))
    saved = tmp_path / "saved"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:4]),
                          "test": datasets.Dataset.from_list(rows[4:])}).save_to_disk(str(saved))

    for path in (jsonl, parquet):
        # path wins over the default builtin=true; the split expressions slice the file's rows.
        task = make_task("tldr", path=str(path), train_split="train[:4]", eval_split="train[4:]")
        train, evals = task.load("train"), task.load("eval")
        assert [it["reference"] for it in train] == [f"summary {i}" for i in range(4)]
        assert [it["reference"] for it in evals] == ["summary 4", "summary 5"]
        assert "body number 5" in task.agent_prompts(evals[1])[1]
    task = make_task("tldr", path=str(saved), train_split="train[:3]", eval_split="test[:1]")
    assert [it["reference"] for it in task.load("train")] == ["summary 0", "summary 1", "summary 2"]
    assert [it["reference"] for it in task.load("eval")] == ["summary 4"]


def test_arxiv_columns(tmp_path):
    # The raw arXiv dump keeps abstracts as lists of sentences; other copies name the column
    # `abstract`, or something else entirely (text_column).
    f = tmp_path / "a.jsonl"
    f.write_text(json.dumps({"article_id": "x", "abstract_text": ["First sentence.", "Second one."]}) + "\n")
    item = make_task("arxiv", path=str(f), eval_split="train[:1]").load("eval")[0]
    assert item["text"] == "First sentence. Second one." and item["reference"] is None
    g = tmp_path / "b.jsonl"
    g.write_text(json.dumps({"summary_src": "An abstract.", "intro": "An intro."}) + "\n")
    with pytest.raises(DataUnavailableError, match="text_column"):  # the data, not the code, is wrong
        make_task("arxiv", path=str(g)).load("train")
    item = make_task("arxiv", path=str(g), text_column="summary_src", reference_column="intro").load("train")[0]
    assert (item["text"], item["reference"]) == ("An abstract.", "An intro.")


def test_hub_offline_error_names_the_fix(tmp_path):
    # A fresh process: `datasets` reads the offline switches when it is imported.
    code = textwrap.dedent("""
        from omegaconf import OmegaConf
        from magrpo.tasks import build_task
        from magrpo.tasks.data import DataUnavailableError
        from magrpo.tasks.writing.data import TldrTaskConfig
        from magrpo.tasks.writing.reward import TldrRewardConfig
        cfg = OmegaConf.merge(OmegaConf.structured(TldrTaskConfig), {"data": {"builtin": False}})
        try:
            build_task(cfg, OmegaConf.structured(TldrRewardConfig)).load("train")
        except DataUnavailableError as e:
            print("ERROR:", e)
    """)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ERROR:" in out.stdout
    assert "trl-lib/tldr" in out.stdout and "task.data.path" in out.stdout and "builtin=true" in out.stdout
    assert issubclass(DataUnavailableError, RuntimeError)


# -- prompts and single-agent answers --------------------------------------------------------
def test_prompts_give_each_agent_its_role():
    tldr, arxiv = make_task("tldr"), make_task("arxiv")
    item = tldr.load("train")[0]
    short, long = tldr.prompts(item, 2)
    body = item["text"].split("POST:", 1)[1].strip().removesuffix("TL;DR:").strip()
    assert body in short and body in long and not short.rstrip().endswith("TL;DR:")
    assert "SHORT" in short and "partner" in short and "detailed" in short
    assert "DETAILED" in long and "transition" in long and "vocabulary" in long and "partner" in long
    single = tldr.prompts(item, 1)
    assert len(single) == 1 and f"only {SPLIT_MARKER}" in single[0] and body in single[0]

    item = arxiv.load("eval")[0]
    bg, method = arxiv.agent_prompts(item)
    assert item["text"] in bg and item["text"] in method
    assert "BACKGROUND" in bg and "method" in bg            # told the partner covers the method
    assert "METHOD" in method and "background" in method
    assert SPLIT_MARKER in arxiv.single_prompt(item)
    with pytest.raises(ValueError, match="2 agents"):
        arxiv.prompts(item, 3)


@pytest.mark.parametrize("answer, parts", [
    ("Short one.\n---\nLonger second part.", ("Short one.", "Longer second part.")),
    ("Short one.\n  ---  \n\nLonger.\n---\nTail.", ("Short one.", "Longer.\n---\nTail.")),   # first marker
    ("Paragraph 1: Short.\n---\nParagraph 2: Long.", ("Short.", "Long.")),                  # labels dropped
    ("Dashes --- inline are not a marker.\n\nSecond paragraph.\n\nThird.",
     ("Dashes --- inline are not a marker.", "Second paragraph.\n\nThird.")),               # blank line
    ("One. Two! Three? Four.", ("One. Two!", "Three? Four.")),                              # sentence halves
    ("One. Two. Three.", ("One.", "Two. Three.")),                                          # odd one to part 2
    ("Just one sentence", ("Just one sentence", "")),
    ("", ("", "")),
])
def test_split_single_answer(answer, parts):
    assert split_single_answer(answer) == parts


def test_single_agent_reward_equals_the_split_pair():
    task = make_task("tldr")
    a1 = "The poster asks whether to pay a car loan or save an emergency fund first."
    a2 = ("The poster, aged 26, has $700 spare each month; however, their father says to clear the "
          "6.9% car loan, whereas a coworker insists on three months of savings first, so they "
          "wonder which order is wiser and whether a middle ground exists.")
    pair = task.reward([["p1", "p2"]], [[a1, a2]])
    for single in (f"{a1}\n{SPLIT_MARKER}\n{a2}", [f"{a1}\n{SPLIT_MARKER}\n{a2}"]):
        s = task.reward([["p"]], [single])
        assert list(s) == list(pair) and s.components == pair.components
    assert pair[0] == pytest.approx(score_pair(a1, a2, TldrRewardConfig()).total)
    assert set(pair.components) == {"structure", "coherence", "style"}
    assert pair.extras["levels_passed"] == [4]
    assert joint_answer([a1, a2]) == (a1, a2)
    with pytest.raises(ValueError):
        joint_answer(["a", "b", "c"])


def test_reward_shift_scale_and_batch():
    task_schema, reward_schema = SCHEMAS["tldr"]
    reward = OmegaConf.merge(OmegaConf.structured(reward_schema), {"shift": -3.0, "scale": 2.0})
    task = build_task(OmegaConf.structured(task_schema), reward)
    s = task.reward([["a", "b"]] * 2, [["too short", "also short"], ["x " * 10, "y " * 30]])
    # raw * scale + shift; the 2nd: rho 3 pays, u = 1 stops
    assert list(s) == pytest.approx([-3.0, (0.5 + 1.0) * 2.0 - 3.0])
    assert s.components["structure"] == pytest.approx([0.0, 1.5])
    assert "level 1 failed" in s.extras["diagnosis"][0] and "level 3 failed" in s.extras["diagnosis"][1]


# -- metrics ---------------------------------------------------------------------------------
def test_rouge_l_metric_matches_rouge_score():
    from rouge_score.rouge_scorer import RougeScorer

    task = make_task("tldr")
    items = task.load("eval")[:3]
    joint = [["Paying off loans early.", "The poster is running daily and saving money."],
             [f"Short answer\n{SPLIT_MARKER}\nA longer answer about spanish lessons"],
             ["", ""]]
    m = task.metrics(items, joint, task.reward([[]] * 3, joint))
    scorer = RougeScorer(["rougeL"], use_stemmer=True)
    preds = [joint[0][0] + "\n" + joint[0][1], "Short answer\nA longer answer about spanish lessons", "\n"]
    expected = sum(scorer.score(it["reference"], p)["rougeL"].fmeasure for it, p in zip(items, preds)) / 3
    assert m["rouge_l"] == pytest.approx(expected) and m["rouge_l"] > 0
    assert m["a1_chars_mean"] == pytest.approx((23 + 12 + 0) / 3)
    assert m["a2_tokens_mean"] == pytest.approx((8 + 6 + 0) / 3)


def test_no_rouge_without_references():
    task = make_task("arxiv")
    items = task.load("eval")[:2]
    m = task.metrics(items, [["a b", "c d e"]] * 2, task.reward([[]] * 2, [["a b", "c d e"]] * 2))
    assert "rouge_l" not in m and m["a2_tokens_mean"] == 3.0


# -- score_pairs -----------------------------------------------------------------------------
def test_score_pairs(tmp_path):
    a1 = "The poster asks whether to pay a car loan or save an emergency fund first."
    a2 = ("The poster, aged 26, has $700 spare each month; however, their father says to clear the "
          "loan, whereas a coworker insists on three months of savings first.")
    f = tmp_path / "pairs.jsonl"
    f.write_text(json.dumps({"a1": a1, "a2": a2}) + "\n\n" + json.dumps({"a1": "hi", "a2": "there"}) + "\n")
    rows = score_pairs("tldr", str(f))
    ref = score_pair(a1, a2, TldrRewardConfig())
    assert rows[0] == {"line": 1, "reward": ref.total, "structure": ref.structure, "coherence": ref.coherence,
                       "style": ref.style, "levels_passed": ref.levels_passed}
    assert rows[1]["line"] == 3 and rows[1]["reward"] == 0.0
    assert score_pairs("arxiv", str(f))[0]["reward"] == 0.0     # arXiv needs 128+ tokens each

    for bad, why in (("{not json", "not valid JSON"), (json.dumps({"a1": "x"}), "a1"),
                     (json.dumps(["a1", "a2"]), "a1"), (json.dumps({"a1": "x", "a2": 3}), "a2")):
        f.write_text(json.dumps({"a1": a1, "a2": a2}) + "\n" + bad + "\n")
        with pytest.raises(ValueError, match=f"line 2 .*{why}"):
            score_pairs("tldr", str(f))
    with pytest.raises(ValueError, match="unknown writing task"):
        score_pairs("humaneval", str(f))
    with pytest.raises(ValueError, match="cannot read"):
        score_pairs("tldr", str(tmp_path / "missing.jsonl"))
