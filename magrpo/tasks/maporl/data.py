"""Math word problems for `maporl_qa`: GSM8K from the hub or a local copy, or a built-in generator.

`task.data` node:

    builtin: true          # offline: seeded generated problems (task.num_train / num_eval, any size)
    hub_id: openai/gsm8k   # used when builtin is false and path is null
    config_name: main
    path: null             # a local GSM8K-format file (question, answer) or saved dataset: wins
    train_split / eval_split / limit   # split expressions, as for every dataset task

Every item is {"id", "question", "answer"} with the answer a plain number string; GSM8K's answers
("...reasoning... #### 1,234") keep the number after "####".

The generator composes one to three arithmetic steps over small integers from a few story
templates; every intermediate value is a non-negative integer, so the exact answer is known.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from magrpo.config.groups import TaskConfig
from magrpo.core.schema import at_least, option, within
from magrpo.tasks.data import BuiltinKeys, DataKeys, ItemCountKeys, load_split, require_columns

NAMES = ["Ava", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jo", "Kofi", "Lena", "Mateo",
         "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tara"]
THINGS = ["apples", "marbles", "stickers", "books", "pencils", "cookies", "shells", "cards", "coins", "stamps"]


@dataclass
class MaporlDataConfig(BuiltinKeys, DataKeys):
    """builtin: generated arithmetic problems; false: GSM8K from hub_id (or path)."""

    hub_id: str | None = option("openai/gsm8k", help="the hub dataset read when builtin is false")
    config_name: str | None = option("main", help="the hub dataset's configuration")


def _start(rng: random.Random, name: str, thing: str) -> tuple[str, int]:
    n = rng.randint(5, 60)
    return f"{name} has {n} {thing}.", n


# One step: (rng, value, name, thing) -> (sentence, new value); each keeps the value a non-negative integer.
def _buy(rng, v, name, thing):
    k = rng.randint(2, 30)
    return f"Then {name} gets {k} more {thing}.", v + k


def _give(rng, v, name, thing):
    if v == 0:                       # nothing left to give
        return _buy(rng, v, name, thing)
    k = rng.randint(1, v)
    other = rng.choice([n for n in NAMES if n != name])
    return f"Then {name} gives {k} {thing} to {other}.", v - k


def _multiply(rng, v, name, thing):
    k = rng.randint(2, 5)
    return f"Then the number of {thing} {name} has becomes {k} times as large.", v * k


def _packs(rng, v, name, thing):
    packs, per = rng.randint(2, 6), rng.randint(2, 12)
    return f"Then {name} buys {packs} packs with {per} {thing} in each pack.", v + packs * per


def _share(rng, v, name, thing):
    # Share equally among k friends (k divides v), keep one share.
    divisors = [k for k in range(2, 7) if v % k == 0]
    if not divisors:
        return _buy(rng, v, name, thing)
    k = rng.choice(divisors)
    return f"Then {name} splits the {thing} equally into {k} groups and keeps one group.", v // k


STEPS = [_buy, _give, _multiply, _packs, _share]


def generate_problem(rng: random.Random, num_steps: int) -> tuple[str, int]:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    sentence, value = _start(rng, name, thing)
    parts = [sentence]
    for _ in range(num_steps):
        sentence, value = rng.choice(STEPS)(rng, value, name, thing)
        parts.append(sentence)
    parts.append(f"How many {thing} does {name} have now?")
    return " ".join(parts), value


def builtin_items(split: str, n: int, seed: int, max_steps: int) -> list[dict[str, Any]]:
    """`n` generated problems; train and eval come from separate seeded streams."""
    rng = random.Random(f"maporl_qa/{split}/{seed}")
    items = []
    for i in range(n):
        question, answer = generate_problem(rng, rng.randint(1, max_steps))
        items.append({"id": f"maporl_qa/{split}/{i}", "question": question, "answer": str(answer)})
    return items


_GSM8K_ANSWER = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


def gsm8k_answer(text: Any) -> str:
    """The final number of a GSM8K answer ("... #### 1,234" -> "1234"); a bare number as it is."""
    s = str(text).strip()
    m = _GSM8K_ANSWER.search(s)
    return (m.group(1) if m else s).replace(",", "").replace("$", "").strip()


def load_items(cfg: MaporlTaskConfig, split: str) -> list[dict[str, Any]]:
    data = cfg.data
    if data.builtin and not data.path:
        n = cfg.num_train if split == "train" else cfg.num_eval
        return builtin_items(split, n, cfg.generator_seed, cfg.max_steps)
    rows = load_split(data, split)
    require_columns("maporl_qa", data, rows, [("question", "answer")])
    return [{"id": f"maporl_qa/{split}/{i}", "question": str(r["question"]).strip(), "answer": gsm8k_answer(r["answer"])}
            for i, r in enumerate(rows)]


@dataclass
class MaporlTaskConfig(ItemCountKeys, TaskConfig):
    name: str = "maporl_qa"
    data: MaporlDataConfig = field(default_factory=MaporlDataConfig)
    num_train: int = at_least(1, 256, help="generated problems (builtin)")
    num_eval: int = at_least(1, 64, help="generated eval problems (builtin)")
    generator_seed: int = at_least(0, 0, help="seed of the problem generator (builtin)")
    max_steps: int = within(1, 4, 2, help="arithmetic steps per generated problem: 1..max_steps")
