"""The paper's gated writing reward on hand-built answers whose every measurement is known.

Answers are made of tokens like "k007": no stopwords, no transition phrase hides in them, so
each test controls token counts, character lengths, unique words and overlap exactly. `text`
pads the LAST word with "x" to hit an exact character length without adding a token (where
unique words matter, that last word is a pad word "p"/"q" of its own).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from magrpo.tasks.writing.reward import (
    ArxivRewardConfig,
    TldrRewardConfig,
    check_reward_config,
    load_lexicon,
    score_pair,
    transition_categories,
    transition_score,
    trapezoid,
)

# sha256 of the canonical form below of the reference word lists, taken when the lexicon was
# shipped: any edit of magrpo/tasks/writing/lexicon.json changes it.
LEXICON_SHA256 = "54c138778917991c13107d8e657e0a9aecf6832e3bb1bb32dac093098fd99266"

TLDR, ARXIV = TldrRewardConfig(), ArxivRewardConfig()
# One phrase from each of the 12 categories, none of them inside another category's list.
TWELVE = ["furthermore", "for instance", "in other words", "consequently", "conversely", "lastly",
          "undoubtedly", "to sum up", "by analogy", "in spite of", "unless", "nowadays"]


def ks(n: int, start: int = 0, tag: str = "k") -> list[str]:
    return [f"{tag}{i:03d}" for i in range(start, start + n)]


def text(words: list[str], chars: int | None = None) -> str:
    s = " ".join(words)
    if chars is not None:
        assert len(s) <= chars, (len(s), chars)
        s += "x" * (chars - len(s))
    return s


def total(a1: str, a2: str, cfg=TLDR) -> float:
    return score_pair(a1, a2, cfg).total


# -- level 1: token bounds -------------------------------------------------------------------
# Equal answers (rho = 1 < 1.1) stop tldr at level 2, so a passing level 1 reads exactly 0.5.
@pytest.mark.parametrize("n, expected", [(7, 0.0), (8, 0.5), (256, 0.5), (257, 0.0)])
def test_tldr_token_bounds_each_answer(n, expected):
    ok = text(["k000"] * 20)                                  # 20 tokens, 99 chars
    assert total(text(["k000"] * n), text(["k000"] * n)) == expected
    # Each answer is checked on its own; the other is fine and rho stays outside [1.1, 5].
    assert total(text(["k000"] * n, chars=1300), ok) == expected
    assert total(ok, text(["k000"] * n)) == expected


def test_tokens_are_whitespace_split():
    # 8 whitespace tokens although punctuation and hyphens would give more "words".
    a = "well-known, e.g. state-of-the-art; it's fine: ok? yes!\nend"
    assert len(a.split()) == 8
    assert score_pair(a, a, TLDR).levels_passed == 1
    assert score_pair(a.rsplit(" ", 1)[0], a, TLDR).levels_passed == 0


@pytest.mark.parametrize("n, expected", [(127, 0.0), (128, 0.5), (256, 0.5), (257, 0.0)])
def test_arxiv_token_bounds(n, expected):
    # a2 is 2.5x longer in characters (outside arXiv's ramps, so level 2 stops).
    assert total(text(["k000"] * n, chars=1300), text(["k000"] * 130, chars=3250), ARXIV) == expected
    assert total(text(["k000"] * 130, chars=1300), text(["k000"] * n, chars=3250), ARXIV) == expected


# -- level 2: length ratio -------------------------------------------------------------------
# a1 = 100 chars; a2 repeats a1's only word, so u = 1 fails level 3 and total = 0.5 + level 2.
@pytest.mark.parametrize("a2_chars, level2", [
    (109, None),            # rho 1.09: below the ramp, stop
    (110, 0.0),             # ramp start: pays 0 but passes
    (135, 0.5),             # ramp midpoint (1.35)
    (160, 1.0), (250, 1.0), (320, 1.0),   # band [1.6, 3.2]
    (410, 0.5),             # falling ramp midpoint (4.1)
    (500, 0.0),             # ramp end
    (501, None),            # above 5.0: stop
])
def test_tldr_length_ratio(a2_chars, level2):
    a1 = text(["abcd"] * 20, chars=100)
    a2 = text(["abcd"] * 20, chars=a2_chars)
    r = score_pair(a1, a2, TLDR)
    assert r.total == pytest.approx(0.5 + (level2 or 0.0))
    assert r.levels_passed == (1 if level2 is None else 2)
    assert r.coherence == r.style == 0.0


def test_ramp_edge_passes_to_the_next_level():
    # rho exactly 1.1 pays 0 at level 2 but level 3 (u = 2: +0.5) and level 4 still pay.
    a1 = text(["abcd"] * 20, chars=100)                       # words {abcd, abcdx}
    a2 = text(["abce", "abcf"] + ["abcd"] * 19, chars=110)    # 4 distinct words: u = 2
    r = score_pair(a1, a2, TLDR)
    # Jaccard 1/5 >= 0.03: style = 0.6; no transitions: coherence 0.
    assert (r.structure, r.coherence, r.style) == pytest.approx((1.0, 0.0, 0.6))
    assert r.total == pytest.approx(1.6)


@pytest.mark.parametrize("a2_chars, level2", [
    (799, None), (800, 0.0), (1050, 0.5), (1300, 1.0), (1450, 1.0), (1600, 1.0),
    (1800, 0.5), (2000, 0.0), (2001, None)])
def test_arxiv_length_ratio(a2_chars, level2):
    # a1: 150 distinct words; a2: one word repeated, so u < 0.5 fails level 3.
    a1 = text(ks(150), chars=1000)
    a2 = text(["k000"] * 150, chars=a2_chars)
    r = score_pair(a1, a2, ARXIV)
    assert r.total == pytest.approx(0.5 + (level2 or 0.0))
    assert r.levels_passed == (1 if level2 is None else 2)


def test_arxiv_gating_stops_after_failed_level2():
    # Everything after level 2 would pay (same vocabulary, transitions in both), yet a ratio of
    # 2.1 must leave exactly the level-1 amount.
    words = ks(140) + ["consequently", "however"]
    r = score_pair(text(words, chars=1000), text(words, chars=2100), ARXIV)
    assert (r.structure, r.coherence, r.style, r.levels_passed) == (0.5, 0.0, 0.0, 1)


# -- level 3: unique-word ratio --------------------------------------------------------------
# tldr: a1 = 20 distinct words (99 chars); a2 = 50 tokens over its first `unique2` words, 249
# chars (rho 2.52: level 2 pays 1.0); a2 holds a1's words, so Jaccard >= 0.4 saturates: style 0.6.
@pytest.mark.parametrize("unique2, level3", [
    (25, None),     # u = 1.25 < 1.3: stop
    (26, 0.0),      # u = 1.3: ramp start, passes
    (33, 0.25),     # u = 1.65: ramp midpoint
    (40, 0.5),      # u = 2.0
    (50, 0.5),      # u = 2.5: no upper limit for tldr
])
def test_tldr_unique_ratio(unique2, level3):
    a1 = text(ks(20))
    a2 = text((ks(unique2) * 3)[:50])
    assert len(set(a2.split())) == unique2 and len(a2.split()) == 50
    r = score_pair(a1, a2, TLDR)
    if level3 is None:
        assert r.total == pytest.approx(1.5) and r.levels_passed == 2
    else:
        assert r.structure == pytest.approx(1.5 + level3)
        assert r.total == pytest.approx(1.5 + level3 + 0.6)


@pytest.mark.parametrize("unique2, level3", [
    (49, None), (50, 0.0), (60, 0.25), (70, 0.5), (100, 0.5), (130, 0.5), (150, 0.25),
    (170, 0.0), (171, None)])
def test_arxiv_unique_ratio(unique2, level3):
    # a1: 100 distinct words in 150 tokens, 1000 chars; a2: 180 tokens, 1450 chars (rho 1.45).
    a1 = text((ks(99) * 2)[:149] + ["p"], chars=1000)
    a2 = text((ks(unique2 - 1) * 4)[:179] + ["q"], chars=1450)
    assert len(set(a2.split())) == unique2
    r = score_pair(a1, a2, ARXIV)
    if level3 is None:
        assert r.total == pytest.approx(1.5) and r.levels_passed == 2
    else:
        assert r.total == pytest.approx(1.5 + level3 + 0.6)


def test_unique_word_quirk_switch():
    # a1: 10 content words + 10 stopwords (89 chars); a2: 30 content words (149 chars, rho 1.67).
    stop = ["the", "and", "for", "was", "are", "but", "not", "you", "all", "any"]
    a1, a2 = text(ks(10) + stop), text(ks(30))
    assert set(stop) <= load_lexicon().stopwords
    # Reference quirk: u = 30 / 20 = 1.5 -> 0.5 * 0.2 / 0.7; fixed: u = 30 / 10 = 3 -> 0.5.
    quirk = score_pair(a1, a2, TLDR)
    fixed = score_pair(a1, a2, dataclasses.replace(TLDR, unique_without_stopwords=True))
    assert quirk.structure == pytest.approx(1.5 + 0.5 * 0.2 / 0.7)
    assert fixed.structure == pytest.approx(2.0)
    assert quirk.stats["unique_ratio"] == pytest.approx(1.5) and fixed.stats["unique_ratio"] == 3.0


# -- level 4: transitions and Jaccard --------------------------------------------------------
def test_transition_formula():
    assert [transition_score(k, TLDR) for k in (0, 1, 2, 5, 12)] == pytest.approx([0.0, 0.4, 0.45, 0.6, 0.95])
    steep = dataclasses.replace(TLDR, transition_step=0.2)
    assert transition_score(4, steep) == pytest.approx(1.0)   # 0.4 + 0.6
    assert transition_score(5, steep) == 1.0                    # capped


@pytest.mark.parametrize("k", [0, 1, 3, 12])
def test_tldr_transitions_counted_in_a2(k):
    whole = dataclasses.replace(TLDR, transition_whole_words=True)
    r = score_pair(text(ks(10)), text(ks(20) + TWELVE[:k]), whole)
    assert r.levels_passed == 4
    assert r.stats["transition_categories"] == list(load_lexicon().transitions)[:k]
    assert r.coherence == pytest.approx(0.4 * (0 if k == 0 else 0.4 + 0.05 * (k - 1)))


def test_tldr_ignores_transitions_in_a1():
    a1, a2 = text(ks(6) + ["furthermore", "consequently"]), text(ks(30))
    for whole in (False, True):
        r = score_pair(a1, a2, dataclasses.replace(TLDR, transition_whole_words=whole))
        assert r.levels_passed == 4 and r.coherence == 0.0


def test_arxiv_transitions_counted_over_both_answers():
    whole = dataclasses.replace(ARXIV, transition_whole_words=True)
    a1 = text(ks(140) + TWELVE[:3] + ["p"], chars=1000)
    a2 = text(ks(140) + TWELVE[3:5] + ["q"], chars=1450)
    r = score_pair(a1, a2, whole)
    assert len(r.stats["transition_categories"]) == 5
    assert r.coherence == pytest.approx(0.4 * 0.6)
    assert r.total == pytest.approx(0.5 + 1.0 + 0.5 + 0.4 * 0.6 + 0.6)


def test_transition_substring_quirk_switch():
    # "reasonable" hides "as" (time) and "so" (cause_effect); "lastly" hides "as" too.
    lex = load_lexicon()
    assert transition_categories("reasonable", lex) == ["cause_effect", "time"]
    assert transition_categories("reasonable", lex, whole_words=True) == []
    assert transition_categories("lastly", lex) == ["sequence", "time"]
    assert transition_categories("Lastly,  IN   OTHER words", lex, whole_words=True) == ["explanation", "sequence"]
    a1, a2 = text(ks(10)), text(ks(30) + ["reasonable"])
    quirk = score_pair(a1, a2, TLDR)
    fixed = score_pair(a1, a2, dataclasses.replace(TLDR, transition_whole_words=True))
    assert quirk.coherence == pytest.approx(0.4 * 0.45) and fixed.coherence == 0.0
    assert quirk.total - fixed.total == pytest.approx(0.18)


@pytest.mark.parametrize("overlap, style", [
    (0, 0.0),
    (1, 0.6 * (1 / 59) / 0.03),   # J = 1/59 under the cap
    (2, 0.6),                     # J = 2/58 > 0.03: capped
])
def test_tldr_jaccard_cap(overlap, style):
    a1 = text(ks(20))
    a2 = text(ks(overlap) + ks(40 - overlap, start=100))
    r = score_pair(a1, a2, TLDR)
    assert r.levels_passed == 4 and r.coherence == 0.0
    assert r.style == pytest.approx(style)
    assert r.total == pytest.approx(0.5 + 1.0 + 0.5 + style)


def test_jaccard_exactly_at_cap_and_stopwords_ignored():
    # 3 shared of 100 distinct content words: J = 0.03 exactly; stopwords in both do not count.
    a1 = text(ks(20) * 2 + ["the", "and"])
    a2 = text(ks(3) + ks(80, start=100) + ["the", "and"])
    r = score_pair(a1, a2, TLDR)
    assert r.stats["jaccard"] == 0.03 and r.style == pytest.approx(0.6)


def test_arxiv_jaccard_cap():
    # J = 30 / 270 = 0.111 under the 0.23 cap: style = 0.6 * 0.111 / 0.23.
    a1 = text(ks(150), chars=1000)
    a2 = text(ks(30) + ks(120, start=500), chars=1450)
    r = score_pair(a1, a2, ARXIV)
    assert r.stats["jaccard"] == pytest.approx(30 / 270)
    assert r.style == pytest.approx(0.6 * (30 / 270) / 0.23)


# -- totals ----------------------------------------------------------------------------------
def test_components_sum_to_raw_and_shift_scale():
    a1 = text(ks(10))
    a2 = text(ks(2) + ks(28, start=100) + ["however", "for example"])
    base = score_pair(a1, a2, TLDR)
    assert base.structure + base.coherence + base.style == pytest.approx(base.raw) == pytest.approx(base.total)
    moved = score_pair(a1, a2, dataclasses.replace(TLDR, shift=-3.0, scale=0.5))
    assert moved.total == pytest.approx(base.raw * 0.5 - 3.0)  # raw * scale + shift
    assert (moved.structure, moved.coherence, moved.style) == (base.structure, base.coherence, base.style)


def test_maximum_is_three():
    # rho 2.4, u = 40 / 20, all 12 categories (0.4 + 11 * 0.1 capped at 1), Jaccard ~ 5/51.
    a1 = text(ks(20))
    a2 = text(ks(5) + ks(16, start=100) + TWELVE)
    r = score_pair(a1, a2, dataclasses.replace(TLDR, transition_step=0.1))
    assert (r.structure, r.coherence, r.style) == pytest.approx((2.0, 0.4, 0.6))
    assert r.total == pytest.approx(3.0)


def test_trapezoid_edges():
    assert trapezoid(2.0, 1.0, 2.0, None, None) == (True, 1.0)
    assert trapezoid(99.0, 1.0, 2.0, None, None) == (True, 1.0)
    assert trapezoid(0.99, 1.0, 2.0, None, None) == (False, 0.0)
    assert trapezoid(3.0, 0.0, 1.0, 2.0, 4.0) == (True, 0.5)


def test_bad_reward_config_rejected():
    with pytest.raises(ValueError, match="length_ramp_low <= length_band_low"):
        check_reward_config(dataclasses.replace(TLDR, length_band_low=4.0))
    with pytest.raises(ValueError, match="jaccard_cap"):
        check_reward_config(dataclasses.replace(ARXIV, jaccard_cap=0.0))
    check_reward_config(TLDR)
    check_reward_config(ARXIV)


# -- the word lists --------------------------------------------------------------------------
def _canonical(stopwords, transitions) -> str:
    return json.dumps({"stopwords": sorted(stopwords),
                       "transitions": {c: sorted(p) for c, p in sorted(transitions.items())}}, sort_keys=True)


def test_lexicon_matches_the_reference_lists():
    lex = load_lexicon()
    assert load_lexicon() is lex                       # read once
    assert len(lex.transitions) == 12
    mine = _canonical(lex.stopwords, lex.transitions)
    assert hashlib.sha256(mine.encode()).hexdigest() == LEXICON_SHA256
