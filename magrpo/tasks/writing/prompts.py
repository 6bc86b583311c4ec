"""Prompts of the paper's writing tasks and the split of a single-agent answer.

Each agent is told its own job and what its partner covers, so the two answers can divide the
work without seeing each other (decentralized execution). The single-agent form (GRPO, the
`single` baseline) asks one model for both parts, separated by a line holding SPLIT_MARKER.
"""

from __future__ import annotations

import re

SPLIT_MARKER = "---"

_MARKER_LINE = re.compile(rf"^[ \t]*{re.escape(SPLIT_MARKER)}[ \t]*$", re.MULTILINE)
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
# "Paragraph 1:" / "Part 2 -" style labels some models put in front of each part.
_LABEL = re.compile(r"^\s*(?:paragraph|part)\s*[12]\s*[:.\-]\s*", re.IGNORECASE)


def split_single_answer(text: str) -> tuple[str, str]:
    """Cut one model's answer into (part 1, part 2), trying in order:

    1. the first line that holds only SPLIT_MARKER ("---"): before it / after it;
    2. the first blank line: the first paragraph / all the rest;
    3. sentences: the first half of the sentences / the second half (the second half gets the
       odd one out); a single sentence gives (text, "").
    Each part is stripped of surrounding white space and of a leading "Paragraph 1:" label.
    """
    body = text.strip()
    m = _MARKER_LINE.search(body)
    if m:
        first, second = body[:m.start()], body[m.end():]
    else:
        parts = _BLANK_LINE.split(body, maxsplit=1)
        if len(parts) == 2:
            first, second = parts
        else:
            sentences = [s for s in _SENTENCE_END.split(body) if s]
            half = len(sentences) // 2
            first, second = " ".join(sentences[:half]), " ".join(sentences[half:])
            if not first:  # one sentence: nothing to give part 2
                first, second = second, ""
    return _LABEL.sub("", first.strip(), count=1), _LABEL.sub("", second.strip(), count=1)


def _post_body(post: str) -> str:
    # TL;DR prompts end with an open "TL;DR:" cue; the instructions below replace it.
    return re.sub(r"\s*TL;DR:\s*$", "", post.strip())


def tldr_prompts(post: str) -> list[str]:
    body = _post_body(post)
    short = (
        "You and a partner are summarizing the Reddit post below together.\n"
        "Your part: the SHORT summary. State the main point of the post in one or two plain "
        "sentences (roughly 15-40 words). Your partner writes a longer, more detailed summary, "
        "so leave the details to them.\n\n"
        f"{body}\n\nShort summary:"
    )
    long = (
        "You and a partner are summarizing the Reddit post below together.\n"
        "Your part: the DETAILED summary. Your partner states the main point in one or two short "
        "sentences; you expand on it in one paragraph about two to three times as long as theirs. "
        "Cover the key details and the situation behind them, connect ideas with transition "
        "words (for example, however, therefore, meanwhile, in addition), and use a richer, more "
        "varied vocabulary than a one-line summary would.\n\n"
        f"{body}\n\nDetailed summary:"
    )
    return [short, long]


def tldr_single_prompt(post: str) -> str:
    body = _post_body(post)
    return (
        "Summarize the Reddit post below in two parts.\n"
        "Part 1: a concise summary of the main point in one or two sentences.\n"
        f"Then a line containing only {SPLIT_MARKER}\n"
        "Part 2: a longer, more detailed summary, two to three times as long as part 1, that adds "
        "the key details, links ideas with transition words (for example, however, therefore, "
        "meanwhile) and uses a richer vocabulary.\n"
        "Write only the two parts and the separator line.\n\n"
        f"{body}\n\nAnswer:"
    )


def arxiv_prompts(abstract: str) -> list[str]:
    body = abstract.strip()
    background = (
        "You and a partner are expanding the scientific abstract below into the introduction of "
        "the paper.\n"
        "Your part: ONE paragraph on the BACKGROUND and MOTIVATION (roughly 140-170 words): the "
        "field, the open problem, and why it matters. Your partner writes the paragraph on the "
        "method and its implications, so do not describe the method or the results.\n\n"
        f"Abstract:\n{body}\n\nBackground and motivation:"
    )
    method = (
        "You and a partner are expanding the scientific abstract below into the introduction of "
        "the paper.\n"
        "Your part: ONE paragraph on the METHOD and IMPLICATIONS (roughly 190-230 words): what "
        "the work does, how, what it finds, and what follows from it. Your partner writes the "
        "paragraph on the background and motivation, so do not repeat them. Keep a consistent "
        "style and link ideas with transition words.\n\n"
        f"Abstract:\n{body}\n\nMethod and implications:"
    )
    return [background, method]


def arxiv_single_prompt(abstract: str) -> str:
    body = abstract.strip()
    return (
        "Expand the scientific abstract below into the introduction of the paper, in two "
        "paragraphs.\n"
        "Paragraph 1 (roughly 140-170 words): the background and motivation.\n"
        f"Then a line containing only {SPLIT_MARKER}\n"
        "Paragraph 2 (roughly 190-230 words): the method, the findings and their implications, "
        "in the same style, with transition words linking the ideas.\n"
        "Write only the two paragraphs and the separator line.\n\n"
        f"Abstract:\n{body}\n\nIntroduction:"
    )
