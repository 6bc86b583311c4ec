"""A task's symmetries as data: `Symmetry`, a relabelling of interchangeable symbols that the
reward does not see (magrpo.tasks.symmetry says what they are for: the contract `check_task` holds
them to, and Other-Play, which trains under them). `Task.symmetries()` returns them, so this module
sits below magrpo.tasks.base, and Other-Play, which mixes into a Task, above it.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

UNITS = ("letter", "word")
PLACES = ("answers", "prompts", "both")


@dataclass(frozen=True)
class Symmetry:
    """`symbols` are interchangeable in the game: any permutation of them leaves the reward as it is.

    unit     "letter": each symbol is one letter a-z, relabelled wherever it appears in the text
             (case kept), as the suite's games read a move from any option letter; "word": whole
             words, matched without regard to case (case kept).
    acts_on  "answers", "prompts" or "both": where the relabelling applies. A letter relabelling
             never applies to prompts (it would rewrite every word of them)."""

    name: str
    symbols: tuple[str, ...]
    unit: str = "word"
    acts_on: str = "both"

    def __post_init__(self) -> None:
        object.__setattr__(self, "symbols", tuple(self.symbols))
        where = f"Symmetry {self.name!r}"
        if self.unit not in UNITS:
            raise ValueError(f"{where}: unit={self.unit!r} is not allowed; choose one of: {', '.join(UNITS)}")
        if self.acts_on not in PLACES:
            raise ValueError(f"{where}: acts_on={self.acts_on!r} is not allowed; choose one of: {', '.join(PLACES)}")
        if len(self.symbols) < 2 or len({s.lower() for s in self.symbols}) != len(self.symbols):
            raise ValueError(f"{where}: needs at least 2 distinct symbols, got {list(self.symbols)}")
        if self.unit == "letter":
            bad = [s for s in self.symbols if not re.fullmatch("[a-z]", s)]
            if bad:
                raise ValueError(f"{where}: a letter symmetry's symbols are single letters a-z, got {bad}")
            if self.acts_on != "answers":
                raise ValueError(f"{where}: a letter relabelling acts on answers only (acts_on='answers'); on a "
                                 f"prompt it would rewrite every word")
        elif any(not s.strip() for s in self.symbols):
            raise ValueError(f"{where}: a word symbol is empty")

    def acts(self, place: str) -> bool:
        """Whether the relabelling applies to a "prompt" or an "answer"."""
        return self.acts_on == "both" or self.acts_on == place + "s"

    def draw(self, rng: random.Random) -> tuple[str, ...]:
        """A random permutation: symbols[i] is relabelled perm[i]."""
        return tuple(rng.sample(self.symbols, len(self.symbols)))

    def inverse(self, perm: Sequence[str]) -> tuple[str, ...]:
        """The permutation that undoes `perm`."""
        back = dict(zip(perm, self.symbols))
        return tuple(back[s] for s in self.symbols)

    def apply(self, text: str, perm: Sequence[str]) -> str:
        """`text` with symbols[i] replaced by perm[i], all at once (a swap of two symbols swaps them)."""
        if self.unit == "letter":
            table = {}
            for a, b in zip(self.symbols, perm):
                table[ord(a)], table[ord(a.upper())] = b, b.upper()
            return text.translate(table)
        mapping = {a.lower(): b for a, b in zip(self.symbols, perm)}
        pattern = r"(?<![A-Za-z])(" + "|".join(re.escape(s) for s in sorted(self.symbols, key=len, reverse=True)) \
            + r")(?![A-Za-z])"
        return re.sub(pattern, lambda m: _cased(m.group(0), mapping[m.group(0).lower()]), text, flags=re.IGNORECASE)


def _cased(original: str, new: str) -> str:
    if original.isupper() and len(original) > 1:
        return new.upper()
    if original[:1].isupper():
        return new[:1].upper() + new[1:]
    return new
