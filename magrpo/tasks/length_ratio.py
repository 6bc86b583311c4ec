"""length_ratio: a built-in cooperation task with a dense, cheap reward.

Agent 2's answer should be 2-3x as long as agent 1's (in characters). Reward: 1 inside the
band, exp(-distance to the band) outside. It needs no data download and no grader, so it is
the embedded default run and the benchmark task: a tiny random model can visibly learn it
(agent 1 learns to stop early, agent 2 to keep going).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from magrpo.config.groups import RewardConfig, TaskConfig
from magrpo.core.schema import ConfigError, at_least, option, positive
from magrpo.tasks import register_task
from magrpo.tasks.base import Item, Scores, Task
from magrpo.tasks.data import ItemCountKeys

# Where a single-agent answer's short part ends when it has no "---" line: a blank line, a line
# break, or the end of the first sentence. The prompt asks for one short sentence first, so the
# first of these is the natural cut; it also gives the reward a graded signal early in training,
# when a policy has yet to learn the marker (every sample would otherwise score the same).
_MARKER_LINE = re.compile(r"^[ \t]*---[ \t]*$", re.MULTILINE)
_FIRST_BREAK = re.compile(r"\n|(?<=[.!?])")


def split_single(text: str) -> tuple[str, str]:
    """(short part, long part) of one model's answer: at a '---' line, else at the first break."""
    m = _MARKER_LINE.search(text)
    if m is None:
        text = text.strip()
        m = _FIRST_BREAK.search(text)
    if m is None:
        return text.strip(), ""
    return text[:m.start()].strip(), text[m.end():].strip()

TOPICS = [
    "the water cycle", "how bees make honey", "why the sky is blue", "the history of paper",
    "how a bicycle stays upright", "the life of a star", "why leaves change colour",
    "how vaccines work", "the invention of the printing press", "how tides form",
    "what makes bread rise", "how a compass works", "the migration of birds",
    "why we dream", "how volcanoes erupt", "the origin of chess", "how rainbows form",
    "how a refrigerator keeps food cold", "the rules of football", "why cats purr",
    "how glass is made", "the structure of an atom", "how coral reefs grow",
    "why the moon has phases", "how a seed becomes a tree", "the first airplane flight",
    "how sound travels", "how maps are drawn", "why ice floats", "how a library is organised",
    "the journey of a letter through the post", "how coffee is grown", "why we need sleep",
    "how a bridge carries weight", "the making of cheese", "how lightning forms",
    "how an election is counted", "why oceans are salty", "how a clock keeps time",
    "the life cycle of a butterfly", "how wind turbines make power", "why bread goes stale",
    "how whales communicate", "the building of the pyramids", "how a lock and key work",
    "why mountains have snow", "how ants find food", "how a camera captures light",
]


@dataclass
class LengthRatioTaskConfig(ItemCountKeys, TaskConfig):
    name: str = "length_ratio"
    num_train: int = at_least(1, 32, help="training topics from the built-in list")
    num_eval: int = at_least(1, 16, help="eval topics from the built-in list")

    @staticmethod
    def check_node(node: Any, prefix: str) -> None:
        if node.num_train + node.num_eval > len(TOPICS):
            raise ConfigError(f"{prefix}num_train + {prefix}num_eval = {node.num_train} + {node.num_eval} "
                              f"exceeds the {len(TOPICS)} built-in length_ratio topics; their sum must be "
                              f"<= {len(TOPICS)}")


@dataclass
class LengthRatioRewardConfig(RewardConfig):
    name: str = option("length_ratio", help="the reward variant (its task's name)")
    min_ratio: float = at_least(0, 2.0, help="low edge of the paid band of chars(a2) / chars(a1)")
    max_ratio: float = positive(3.0, help="high edge of that band")

    @staticmethod
    def check_node(node: Any, prefix: str) -> None:
        if node.min_ratio > node.max_ratio:
            raise ConfigError(f"{prefix}min_ratio={node.min_ratio!r} is above {prefix}max_ratio={node.max_ratio!r}; "
                              f"the band needs min_ratio <= max_ratio")


def band_reward(ratio: float, lo: float, hi: float) -> float:
    """1 inside [lo, hi], exp(-distance to the band) outside."""
    if lo <= ratio <= hi:
        return 1.0
    return math.exp(-(lo - ratio if ratio < lo else ratio - hi))


@register_task("length_ratio")
class LengthRatioTask(Task):
    num_agents = 2
    config_schema = LengthRatioTaskConfig
    reward_schema = LengthRatioRewardConfig
    cfg: LengthRatioTaskConfig
    reward_cfg: LengthRatioRewardConfig

    def load(self, split: str) -> list[Item]:
        n_train, n_eval = self.cfg.num_train, self.cfg.num_eval
        if n_train + n_eval > len(TOPICS):
            raise ValueError(f"task.num_train + task.num_eval = {n_train + n_eval} exceeds the "
                             f"{len(TOPICS)} built-in length_ratio topics")
        topics = TOPICS[:n_train] if split == "train" else TOPICS[n_train:n_train + n_eval]
        return [{"id": f"length_ratio/{split}/{i}", "topic": t} for i, t in enumerate(topics)]

    def agent_prompts(self, item: Item) -> list[str]:
        t = item["topic"]
        return [f"In one short sentence, explain {t}.",
                f"In a detailed paragraph two to three times longer than a one-sentence answer, explain {t}."]

    def single_prompt(self, item: Item) -> str:
        return (f"Explain {item['topic']} twice: first in one short sentence, then, after a line "
                f"with '---', in a paragraph two to three times as long.")

    def reward_max(self, num_answers: int) -> float:
        return 1.0   # inside the band

    def reward(self, prompts: list[list[str]], completions: list[list[str]], **cols) -> Scores:
        r = self.reward_cfg
        totals, ratios, inside = [], [], []
        for joint in completions:
            if len(joint) == 1:  # single-agent form: both parts in one answer
                joint = list(split_single(joint[0]))
            a1, a2 = joint[0], joint[1]
            ratio = len(a2) / max(len(a1), 1)
            ratios.append(ratio)
            inside.append(r.min_ratio <= ratio <= r.max_ratio)
            totals.append(band_reward(ratio, r.min_ratio, r.max_ratio) * r.scale + r.shift)  # raw * scale + shift
        return Scores(totals, {"length_ratio": ratios}, {"passed": inside})
