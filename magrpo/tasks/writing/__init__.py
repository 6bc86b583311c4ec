"""The paper's writing tasks: `tldr` (Reddit post summaries) and `arxiv` (introductions from
abstracts), two agents each, the paper's gated writing reward (see `reward.py`).

    task=tldr    agent 1: a short, concise summary; agent 2: a longer, detailed one
    task=arxiv   agent 1: background and motivation; agent 2: method and implications

`score_pairs` scores a file of {"a1", "a2"} lines outside training (`magrpo-score tldr FILE`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from magrpo.tasks import register_task
from magrpo.tasks.base import Item, Scores, Task
from magrpo.tasks.metrics import rouge_l
from magrpo.tasks.writing.data import ArxivTaskConfig, TldrTaskConfig, load_items
from magrpo.tasks.writing.prompts import (
    SPLIT_MARKER,
    arxiv_prompts,
    arxiv_single_prompt,
    split_single_answer,
    tldr_prompts,
    tldr_single_prompt,
)
from magrpo.tasks.writing.reward import (
    REWARD_SCHEMAS,
    ArxivRewardConfig,
    TldrRewardConfig,
    WritingRewardConfig,
    WritingScore,
    check_reward_config,
    load_lexicon,
    score_pair,
)

if TYPE_CHECKING:       # start-up: magrpo.config.schemas loads OmegaConf, and the tasks load without it
    from magrpo.config.schemas import SandboxSchema

COMPONENTS = ("structure", "coherence", "style")


def joint_answer(completion: str | Sequence[str]) -> tuple[str, str]:
    """(a1, a2) of one joint answer: two agents' strings, or one string (or a one-element
    list) from a single model, split at SPLIT_MARKER with the fallbacks of split_single_answer."""
    if isinstance(completion, str):
        return split_single_answer(completion)
    if len(completion) == 1:
        return split_single_answer(completion[0])
    if len(completion) != 2:
        raise ValueError(f"writing tasks take 2 answers per joint action, got {len(completion)}")
    return completion[0], completion[1]


def scores_of(results: Sequence[WritingScore]) -> Scores:
    return Scores(
        [r.total for r in results],
        {c: [getattr(r, c) for r in results] for c in COMPONENTS},
        {"levels_passed": [r.levels_passed for r in results],
         "diagnosis": [r.diagnosis for r in results],
         "stats": [r.stats for r in results]},
    )


class WritingTask(Task):
    num_agents = 2
    primary_metric = "normalized_return"   # the paper's headline number for the writing tasks
    feedback_kind = "writing"
    cfg: TldrTaskConfig | ArxivTaskConfig
    reward_cfg: WritingRewardConfig
    # the task's prompts from an item's text (magrpo.tasks.writing.prompts): one per agent, and the single model's
    prompts_of_text: Callable[[str], list[str]]
    single_prompt_of_text: Callable[[str], str]

    def __init__(self, cfg: TldrTaskConfig | ArxivTaskConfig, reward_cfg: WritingRewardConfig,
                 sandbox: SandboxSchema | None = None):
        super().__init__(cfg, reward_cfg, sandbox)
        check_reward_config(reward_cfg)

    def load(self, split: str) -> list[Item]:
        return load_items(self.name, self.cfg.data, split)

    def agent_prompts(self, item: Item) -> list[str]:
        return self.prompts_of_text(item["text"])

    def single_prompt(self, item: Item) -> str:
        return self.single_prompt_of_text(item["text"])

    def reward_max(self, num_answers: int) -> float:
        """Every level paid: 3.0 with the reference weights (0.5 + 1.0 + 0.5 + 0.4 + 0.6), whether
        one model or two write the answer."""
        r = self.reward_cfg
        return (r.structure_reward + r.length_reward + r.unique_reward + r.transition_weight * r.transition_cap
                + r.jaccard_weight)

    def reward(self, prompts: list[list[str]], completions: list[Any], **cols: list[Any]) -> Scores:
        return scores_of([score_pair(*joint_answer(c), self.reward_cfg) for c in completions])

    def metrics(self, items: Sequence[Item], completions: list[Any], scores: Scores) -> dict[str, float]:
        pairs = [joint_answer(c) for c in completions]
        n = max(len(pairs), 1)
        out = {
            "a1_chars_mean": sum(len(a1) for a1, _ in pairs) / n,
            "a2_chars_mean": sum(len(a2) for _, a2 in pairs) / n,
            "a1_tokens_mean": sum(len(a1.split()) for a1, _ in pairs) / n,
            "a2_tokens_mean": sum(len(a2.split()) for _, a2 in pairs) / n,
        }
        # ROUGE-L of the joint answer against the item's reference, over the items that have one.
        with_ref = [(a1 + "\n" + a2, str(it["reference"])) for (a1, a2), it in zip(pairs, items)
                    if it.get("reference")]
        if with_ref:
            out["rouge_l"] = rouge_l([p for p, _ in with_ref], [r for _, r in with_ref])
        return out


@register_task("tldr")
class TldrTask(WritingTask):
    """TL;DR: two agents summarize a Reddit post together, one in a sentence or two, the other in a
    paragraph two to three times as long, scored by the paper's gated writing reward."""

    config_schema = TldrTaskConfig
    reward_schema = TldrRewardConfig
    prompts_of_text = staticmethod(tldr_prompts)
    single_prompt_of_text = staticmethod(tldr_single_prompt)


@register_task("arxiv")
class ArxivTask(WritingTask):
    """arXiv: two agents expand a paper's abstract into its introduction, one paragraph on the
    background and motivation, one on the method and its implications, scored by the paper's
    gated writing reward."""

    config_schema = ArxivTaskConfig
    reward_schema = ArxivRewardConfig
    prompts_of_text = staticmethod(arxiv_prompts)
    single_prompt_of_text = staticmethod(arxiv_single_prompt)


def score_pairs(task_name: str, path: str, reward_cfg: WritingRewardConfig | None = None) -> list[dict[str, Any]]:
    """Score a jsonl file of {"a1": str, "a2": str} lines with the training reward.

    One dict per non-blank line: `line`, `reward`, each component, `levels_passed`. `reward_cfg`
    defaults to the task's reference reward config. A bad line raises ValueError naming it.
    """
    if task_name not in REWARD_SCHEMAS:
        raise ValueError(f"score_pairs: unknown writing task {task_name!r}; choose one of "
                         f"{', '.join(REWARD_SCHEMAS)}")
    cfg = reward_cfg if reward_cfg is not None else REWARD_SCHEMAS[task_name]()
    check_reward_config(cfg)
    try:
        lines = Path(path).read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read {path}: {e}") from None
    out = []
    for lineno, line in enumerate(lines, start=1):
        if line.strip():
            out.append(_score_line(path, lineno, line, cfg))
    return out


def _score_line(path: str, lineno: int, line: str, cfg: WritingRewardConfig) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: line {lineno} is not valid JSON ({e.msg})") from None
    if not isinstance(row, dict) or not all(isinstance(row.get(k), str) for k in ("a1", "a2")):
        raise ValueError(f"{path}: line {lineno} needs string fields \"a1\" and \"a2\"")
    r = score_pair(row["a1"], row["a2"], cfg)
    return {"line": lineno, "reward": r.total, **{c: getattr(r, c) for c in COMPONENTS},
            "levels_passed": r.levels_passed}


__all__ = ["ArxivTask", "SPLIT_MARKER", "TldrTask", "WritingTask", "joint_answer", "load_lexicon",
           "score_pair", "score_pairs", "split_single_answer"]
