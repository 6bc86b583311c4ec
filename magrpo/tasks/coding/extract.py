"""From a model's free-form answer to a program the sandbox can run.

Chat models wrap code in markdown fences, add prose before and after, repeat the prompt's
signature, print example calls, or (agent 2) define the helper they were told not to. The rules
here, in order:

1. Fences: if the answer has ```python / ```py / bare ``` blocks, only their contents count (all
   of them, in order; an unclosed last fence runs to the end of the answer). Blocks tagged with
   another language (```text, ```bash, ```output) are ignored unless they are all there is.
2. Top-level filter: the code is split into top-level statements and only definitions survive:
   imports, `def`/`class` (with decorators), and plain assignments that call nothing the answer
   defines (constants such as `MOD = 10**9 + 7`). Prose, example calls, prints, asserts and
   `if __name__ == "__main__":` blocks are dropped, so nothing but definitions runs at import.
   A `def` that does not parse is KEPT, so its syntax error is seen by the syntax level of the
   reward instead of silently disappearing; any other unparseable line is prose and dropped.
3. Roles: agent 2's answer loses any top-level definition of the helper (`aux`), so the helper
   that runs is agent 1's (the reference keeps only the entry point from agent 2's answer, which
   drops such a redefinition too); agent 1's answer loses any definition of the entry point,
   which is agent 2's job. Everything else either agent defines (its own sub-helpers, imports)
   is kept: the reference keeps only the single named function, which breaks a helper that
   calls a sub-helper defined next to it.
4. Program = task imports (those the prompt shows) + agent 1's code + agent 2's code.
   Where a name is defined twice, the later definition wins, as in Python.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from magrpo.sandbox.judge import parse_code

HELPER_NAME = "aux"

_FENCE_RE = re.compile(r"^[ \t]*```[ \t]*([\w+.-]*)[^\n]*\n", re.MULTILINE)
_CLOSE_RE = re.compile(r"^[ \t]*```[ \t]*$", re.MULTILINE)
_PY_TAGS = {"", "python", "py", "python3", "py3", "pycon"}
_DEF_START = re.compile(r"^(async\s+def|def|class)\s+(\w+)")
_DEF_OR_DECO = re.compile(r"^(@|async\s+def\s|def\s|class\s)")
_IMPORT_START = re.compile(r"^(import|from)\s+[\w.]+")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of every ``` block, in order; an unclosed last block runs to the end."""
    blocks, pos = [], 0
    while True:
        m = _FENCE_RE.search(text, pos)
        if not m:
            break
        close = _CLOSE_RE.search(text, m.end())
        end = close.start() if close else len(text)
        blocks.append((m.group(1).lower(), text[m.end():end]))
        if not close:
            break
        pos = close.end()
    return blocks


def strip_fences(text: str) -> str:
    """The code part of an answer (rule 1). Text without fences is returned as it is."""
    if not text:
        return ""
    blocks = [(tag, body) for tag, body in fenced_blocks(text) if body.strip()]
    if not blocks:
        # No fence, or only a stray one (code then a closing "```", a fence opened mid-line):
        # the whole answer, the top-level filter drops the prose.
        return textwrap.dedent(text.replace("```", ""))
    python = [body for tag, body in blocks if tag in _PY_TAGS]
    chosen = python or [body for _, body in blocks]
    return "\n\n".join(textwrap.dedent(b).strip("\n") for b in chosen)


def top_level_chunks(code: str) -> list[str]:
    """Split source into top-level statements. Parses it when possible (exact); otherwise a line
    at column 0 starts a new chunk and indented or blank lines belong to the current one, with
    decorators attached to the definition below them."""
    try:
        tree = parse_code(code)
    except SyntaxError:
        tree = None
    lines = code.splitlines()
    if tree is not None:
        statements = []
        for node in tree.body:
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            statements.append("\n".join(lines[start - 1:node.end_lineno]))
        return statements
    chunks: list[list[str]] = []
    pending_decorators: list[str] = []
    for line in lines:
        starts_new = bool(line) and not line[0].isspace() and not line.startswith("#")
        if starts_new and line.startswith("@"):
            pending_decorators.append(line)
            continue
        if starts_new or not chunks:
            if starts_new and line.lstrip().startswith((")", "]", "}")) and chunks:
                chunks[-1].append(line)  # closing bracket of a multi-line statement
                continue
            chunks.append(pending_decorators + [line])
            pending_decorators = []
        else:
            chunks[-1].append(line)
    return ["\n".join(c).rstrip() for c in chunks if "\n".join(c).strip()]


def _calls(node: ast.AST) -> set[str]:
    return {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


def defined_name(chunk: str) -> str | None:
    """Name a `def`/`class` chunk defines (works on chunks that do not parse)."""
    body = "\n".join(ln for ln in chunk.splitlines() if not ln.startswith("@"))
    m = _DEF_START.match(body.lstrip())
    return m.group(2) if m else None


def keep_definitions(code: str, drop: tuple[str, ...] = ()) -> str:
    """Rule 2 (+ rule 3 through `drop`): only top-level definitions, minus the names in `drop`."""
    chunks = top_level_chunks(code)
    parsed: list[tuple[str, ast.Module | None]] = []
    for ch in chunks:
        try:
            parsed.append((ch, parse_code(ch)))
        except SyntaxError:
            parsed.append((ch, None))
    defined = {defined_name(ch) for ch, _ in parsed} - {None}
    kept = []
    for ch, tree in parsed:
        name = defined_name(ch)
        if name is not None and name in drop:
            continue
        if tree is None:
            # A broken def is kept so the syntax level sees it; broken anything-else is prose.
            if _DEF_OR_DECO.match(ch.lstrip()) or _IMPORT_START.match(ch.lstrip()):
                kept.append(ch)
            continue
        if not tree.body:
            continue  # comments only
        stmt = tree.body[0]
        if isinstance(stmt, ast.Import | ast.ImportFrom | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            kept.append(ch)
        elif isinstance(stmt, ast.Assign | ast.AnnAssign) and not (_calls(stmt) & (defined | set(drop))):
            kept.append(ch)
    return "\n\n".join(kept)


def extract_code(text: str, drop: tuple[str, ...] = ()) -> str:
    """The definitions in an answer: fences, then the top-level filter, then role drops."""
    return keep_definitions(strip_fences(text), drop)


@dataclass
class Program:
    """One joint answer turned into code. `aux_code`/`main_code` are each agent's kept code
    (single-agent form: everything is in `main_code`); `source` is what the sandbox runs."""

    imports: str
    aux_code: str
    main_code: str

    @property
    def source(self) -> str:
        return "\n\n".join(p for p in (self.imports.strip(), self.aux_code, self.main_code) if p) + "\n"


def build_program(completion: Sequence[str] | str, entry_point: str, imports: str = "",
                  helper: str = HELPER_NAME) -> Program:
    """Joint answer -> Program. A single string (or a one-element list) is the single-agent form:
    one answer holding helper and main, kept whole. With two answers, agent 1 (first) is the
    helper writer and agent 2 (last) writes the entry point."""
    if isinstance(completion, str):
        completion = [completion]
    if len(completion) == 1:
        return Program(imports, "", extract_code(completion[0]))
    aux = extract_code(completion[0], drop=(entry_point,))
    main = extract_code(completion[-1], drop=(helper,))
    return Program(imports, aux, main)
