"""The gated writing reward of the paper's tldr and arxiv tasks (arXiv 2508.04652).

Four levels; a level is looked at only when the one before it passed, so a team first learns
the format, then the length split, then vocabulary, then style:

    1. structure: both answers have min_tokens..max_tokens whitespace tokens     +0.5
    2. length ratio rho = len(a2) / len(a1) in characters                     +1.0 * trap(rho)
    3. unique-word ratio u = |words(a2)| / |words(a1)|                        +0.5 * trap(u)
    4. style: transition_weight * T + jaccard_weight * J

trap() is a trapezoid: 1 on the band [band_low, band_high], linear ramps down to 0 at ramp_low
and ramp_high, and outside [ramp_low, ramp_high] the level fails and the reward stops there. A
value exactly on a ramp's outer edge pays 0 but passes (the reference does the same: its ramp
intervals are closed at the outer edge). A `null` high edge means no upper limit (tldr level 3).

    T = 0 if no transition category is found, else min(cap, base + step * (k - 1)) for k categories
    J = min(Jaccard(content words of a1, content words of a2), jaccard_cap) / jaccard_cap

Words are lower-cased `\\w+` runs; content words drop the lexicon's stopwords. Two quirks of the
reference code are kept by default, each behind a switch that fixes it:
  * level 3 counts unique words WITH stopwords (its docstring says without):
    `unique_without_stopwords: true` drops them.
  * transition phrases are matched as substrings, so "so" is found in "also" and "as" in "was":
    `transition_whole_words: true` matches whole words/phrases only.

Components carry the paper's metric names and sum to the raw total: `structure` = levels 1-3
(structural wellness), `coherence` = the transition term (logical coherence), `style` = the
Jaccard term (style consistency). The total is raw * scale + shift, as the reference composes
them.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from magrpo.config.groups import RewardConfig
from magrpo.core.checkpoint import allow_state_enum
from magrpo.core.schema import ConfigError, at_least, option, positive

LEXICON_PATH = Path(__file__).with_name("lexicon.json")
_WORD_RE = re.compile(r"\w+")


# -- word lists -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Lexicon:
    stopwords: frozenset[str]
    transitions: dict[str, tuple[str, ...]]  # category -> phrases (lower case)


@functools.cache
def load_lexicon(path: str | None = None) -> Lexicon:
    """The shipped word lists (read once). `path` lets a study swap them; scores then differ."""
    raw = json.loads(Path(path or LEXICON_PATH).read_text(encoding="utf-8"))
    if raw.get("version") != 1:
        raise ValueError(f"lexicon {path or LEXICON_PATH}: unsupported version {raw.get('version')!r}")
    return Lexicon(
        stopwords=frozenset(w.lower() for w in raw["stopwords"]),
        transitions={c: tuple(p.lower() for p in phrases) for c, phrases in raw["transitions"].items()},
    )


# -- config -----------------------------------------------------------------------------------
@allow_state_enum      # an older magrpo pickled it inside a trainer state's config
class TransitionSource(str, Enum):
    """Where level 4 looks for transition phrases (an Enum so a typo fails at start-up)."""

    a2 = "a2"        # agent 2's answer only (tldr)
    both = "both"    # both answers together (arxiv)


# Level weights and the style terms: a negative weight would pay for failing a level.
def _weight(default: float, *, help: str = "") -> Any:
    return at_least(0, default, help=help)


@dataclass
class WritingRewardConfig(RewardConfig):
    """The `reward` node of the writing tasks; defaults are the reference tldr values."""

    name: str = option("tldr", help="the reward variant (its task's name)")
    # level 1: whitespace-token count of EACH answer must lie in [min_tokens, max_tokens]
    min_tokens: int = at_least(0, 8, help="level 1: fewest whitespace tokens per answer")
    max_tokens: int = at_least(1, 256, help="level 1: most whitespace tokens per answer")
    structure_reward: float = _weight(0.5, help="level 1's weight")
    # level 2: rho = chars(a2) / chars(a1)
    length_reward: float = _weight(1.0, help="level 2's weight; rho = chars(a2) / chars(a1)")
    length_ramp_low: float = at_least(0, 1.1, help="rho where level 2's lower ramp starts (below: stop)")
    length_band_low: float = at_least(0, 1.6, help="rho where level 2 starts paying in full")
    length_band_high: float = at_least(0, 3.2, help="rho where level 2 stops paying in full")
    length_ramp_high: float | None = option(5.0,
                                            help="rho where the upper ramp ends "
                                                 "(above: stop); null = no limit")
    # level 3: u = unique words(a2) / unique words(a1)
    unique_reward: float = _weight(0.5, help="level 3's weight; u = unique words(a2) / unique words(a1)")
    unique_ramp_low: float = at_least(0, 1.3, help="u where level 3's lower ramp starts (below: stop)")
    unique_band_low: float = at_least(0, 2.0, help="u where level 3 starts paying in full")
    unique_band_high: float | None = option(None,
                                            help="u where level 3 stops paying in full; null = no limit")
    unique_ramp_high: float | None = option(None,
                                            help="u where the upper ramp ends "
                                                 "(above: stop); null = no limit")
    unique_without_stopwords: bool = option(False, help="false = reference quirk (stopwords counted)")
    # level 4: transition_weight * T + jaccard_weight * J
    transition_weight: float = _weight(0.4,
                                       help="level 4's weight of T: level 4 pays "
                                            "transition_weight * T + jaccard_weight * J")
    transition_base: float = at_least(0, 0.4, help="T with one transition category found")
    transition_step: float = at_least(0, 0.05, help="T added per further category")
    transition_cap: float = at_least(0, 1.0, help="T's maximum")
    transition_source: TransitionSource = option(TransitionSource.a2,
                                                 help="where transitions are looked "
                                                      "for: a2 = agent 2's answer, both")
    transition_whole_words: bool = option(False, help="false = reference quirk (substring match)")
    jaccard_weight: float = _weight(0.6, help="weight of the style term J")
    jaccard_cap: float = positive(0.03,
                                  help="content-word Jaccard that pays in full: J = min(Jaccard, cap) / cap")
    lexicon: str | None = option(None, help="null = the shipped lexicon.json")

    @staticmethod
    def check_node(node: Any, prefix: str) -> None:
        check_reward_config(node, prefix)


@dataclass
class TldrRewardConfig(WritingRewardConfig):
    name: str = "tldr"


@dataclass
class ArxivRewardConfig(WritingRewardConfig):
    name: str = "arxiv"
    min_tokens: int = 128
    max_tokens: int = 256
    length_ramp_low: float = 0.8
    length_band_low: float = 1.3
    length_band_high: float = 1.6
    length_ramp_high: float | None = 2.0
    unique_ramp_low: float = 0.5
    unique_band_low: float = 0.7
    unique_band_high: float | None = 1.3
    unique_ramp_high: float | None = 1.7
    transition_source: TransitionSource = TransitionSource.both
    jaccard_cap: float = 0.23


REWARD_SCHEMAS: dict[str, type[WritingRewardConfig]] = {"tldr": TldrRewardConfig, "arxiv": ArxivRewardConfig}


def check_reward_config(cfg: WritingRewardConfig, prefix: str = "reward.") -> None:
    """Raise ConfigError, naming the keys and their values, when the numbers cannot describe a
    gated reward: an inverted token range or band, a missing lexicon file."""
    problems = []
    if cfg.min_tokens > cfg.max_tokens:
        problems.append(f"{prefix}min_tokens={cfg.min_tokens} is above {prefix}max_tokens={cfg.max_tokens} "
                        f"(need min_tokens <= max_tokens)")
    for level in ("length", "unique"):
        names = [f"{level}_{k}" for k in ("ramp_low", "band_low", "band_high", "ramp_high")]
        edges = [getattr(cfg, n) for n in names]
        finite = [math.inf if e is None else e for e in edges]
        if edges[1] is None or edges[0] is None or finite != sorted(finite) or (edges[2] is None) != (edges[3] is None):
            got = ", ".join(f"{prefix}{n}={e}" for n, e in zip(names, edges))
            problems.append(f"{got} is not a band: need {level}_ramp_low <= {level}_band_low <= "
                            f"{level}_band_high <= {level}_ramp_high (high edges both null for no upper limit)")
    if cfg.jaccard_cap <= 0:
        problems.append(f"{prefix}jaccard_cap={cfg.jaccard_cap} must be > 0")
    if cfg.lexicon and not Path(str(cfg.lexicon)).expanduser().is_file():
        problems.append(f"{prefix}lexicon={str(cfg.lexicon)!r}: no such file (null = the shipped lexicon.json)")
    if problems:
        raise ConfigError("; ".join(problems))


# -- measurements -----------------------------------------------------------------------------
def count_tokens(text: str) -> int:
    return len(text.split())


def words(text: str) -> list[str]:
    return _WORD_RE.findall(text.lower())


def word_set(text: str, stopwords: frozenset[str] | None = None) -> set[str]:
    ws = set(words(text))
    return ws - stopwords if stopwords else ws


def jaccard(a: set[str], b: set[str]) -> float:
    # Two answers with no content words at all count as identical, as in the reference.
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


@functools.cache
def _category_pattern(phrases: tuple[str, ...]) -> re.Pattern[str]:
    # One alternation per category: a phrase counts when no word character touches either end;
    # its inner spaces match any run of white space.
    bodies = sorted((r"\s+".join(re.escape(w) for w in p.split()) for p in phrases), key=len, reverse=True)
    return re.compile(rf"(?<!\w)(?:{'|'.join(bodies)})(?!\w)")


def transition_categories(text: str, lexicon: Lexicon, whole_words: bool = False) -> list[str]:
    """Categories with at least one phrase in `text`, in lexicon order."""
    low = text.lower()
    found = []
    for category, phrases in lexicon.transitions.items():
        if whole_words:
            hit = _category_pattern(phrases).search(low) is not None
        else:
            hit = any(p in low for p in phrases)
        if hit:
            found.append(category)
    return found


def trapezoid(x: float, ramp_low: float, band_low: float, band_high: float | None,
              ramp_high: float | None) -> tuple[bool, float]:
    """(passed, value in [0, 1]): 1 on [band_low, band_high], linear ramps to 0 at the ramp edges."""
    band_high = math.inf if band_high is None else band_high
    ramp_high = math.inf if ramp_high is None else ramp_high
    if band_low <= x <= band_high:
        return True, 1.0
    if ramp_low <= x < band_low:
        return True, (x - ramp_low) / (band_low - ramp_low)
    if band_high < x <= ramp_high:
        return True, 1.0 - (x - band_high) / (ramp_high - band_high)
    return False, 0.0


def transition_score(k: int, cfg: WritingRewardConfig) -> float:
    # T = min(cap, base + step * (k - 1)) for k >= 1 categories, 0 without any.
    if k <= 0:
        return 0.0
    return min(cfg.transition_cap, cfg.transition_base + cfg.transition_step * (k - 1))


# -- the reward -------------------------------------------------------------------------------
@dataclass
class WritingScore:
    total: float                  # raw * scale + shift
    raw: float
    structure: float              # levels 1-3
    coherence: float              # transition_weight * T
    style: float                  # jaccard_weight * J
    levels_passed: int            # 0..4
    diagnosis: str                # why it stopped, in words (feedback and logs)
    stats: dict[str, Any] = field(default_factory=dict)


def score_pair(a1: str, a2: str, cfg: WritingRewardConfig) -> WritingScore:
    """The gated reward of one joint answer (a1, a2) under reward config `cfg`."""
    lex = load_lexicon(cfg.lexicon)
    t1, t2 = count_tokens(a1), count_tokens(a2)
    stats: dict[str, Any] = {"tokens_a1": t1, "tokens_a2": t2, "chars_a1": len(a1), "chars_a2": len(a2)}
    structure = coherence = style = 0.0

    def done(levels: int, why: str) -> WritingScore:
        raw = structure + coherence + style
        return WritingScore(raw * cfg.scale + cfg.shift, raw, structure, coherence, style, levels, why, stats)

    # Level 1: format.
    lo, hi = cfg.min_tokens, cfg.max_tokens
    bad = [f"answer {i} has {t} tokens" for i, t in ((1, t1), (2, t2)) if not lo <= t <= hi]
    if bad:
        return done(0, f"level 1 failed: {' and '.join(bad)} (each needs {lo}-{hi})")
    structure += cfg.structure_reward

    # Level 2: length split, rho = chars(a2) / chars(a1).
    rho = len(a2) / len(a1) if a1 else 0.0
    stats["length_ratio"] = rho
    ok, v = trapezoid(rho, cfg.length_ramp_low, cfg.length_band_low, cfg.length_band_high, cfg.length_ramp_high)
    if not a1 or not ok:
        return done(1, f"level 2 failed: length ratio a2/a1 = {rho:.2f}, outside "
                       f"[{cfg.length_ramp_low}, {cfg.length_ramp_high}] (best {cfg.length_band_low}-{cfg.length_band_high})")
    structure += cfg.length_reward * v

    # Level 3: vocabulary, u = unique words(a2) / unique words(a1).
    drop = lex.stopwords if cfg.unique_without_stopwords else None
    u1, u2 = len(word_set(a1, drop)), len(word_set(a2, drop))
    u = u2 / u1 if u1 else 0.0
    stats["unique_ratio"] = u
    ok, v = trapezoid(u, cfg.unique_ramp_low, cfg.unique_band_low, cfg.unique_band_high, cfg.unique_ramp_high)
    if not u1 or not ok:
        upper = "no upper limit" if cfg.unique_ramp_high is None else f"at most {cfg.unique_ramp_high}"
        return done(2, f"level 3 failed: unique-word ratio a2/a1 = {u:.2f}, needs at least "
                       f"{cfg.unique_ramp_low} ({upper})")
    structure += cfg.unique_reward * v

    # Level 4: style. arxiv looks for transitions in both answers; plain concatenation is what
    # the reference matches substrings in, a line break keeps whole-word matching honest.
    both = TransitionSource(cfg.transition_source) is TransitionSource.both
    text = a1 + ("\n" if cfg.transition_whole_words else "") + a2 if both else a2
    cats = transition_categories(text, lex, cfg.transition_whole_words)
    j = jaccard(word_set(a1, lex.stopwords), word_set(a2, lex.stopwords))
    stats.update(transition_categories=cats, jaccard=j)
    coherence = cfg.transition_weight * transition_score(len(cats), cfg)
    style = cfg.jaccard_weight * min(j, cfg.jaccard_cap) / cfg.jaccard_cap
    return done(4, f"all levels passed: {len(cats)} transition categories, Jaccard {j:.3f}")
