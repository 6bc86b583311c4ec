"""Static checks on extracted code: is a function defined with a return, does main call the
helper, is main a thin wrapper of it, is a helper result thrown away.

The reference implementation does these checks with regexes over the text (comments and
docstrings included). Here they use the syntax tree where the code parses; the one check that
must work on code that does NOT parse (level 1 runs before the syntax level) falls back to text.
"""

from __future__ import annotations

import ast
import re

from magrpo.sandbox.judge import parse_code
from magrpo.tasks.coding.extract import top_level_chunks

_RETURN_LINE = re.compile(r"^\s*return\b(?!\s*$)")
_FUNC_DEF = re.compile(r"^(?:async\s+)?def\s+(\w+)")


def _function_name(chunk: str) -> str | None:
    """Name of the function a top-level chunk defines (decorators skipped; works unparsed)."""
    body = [ln for ln in chunk.splitlines() if ln.strip() and not ln.startswith(("@", "#"))]
    m = _FUNC_DEF.match(body[0]) if body else None
    return m.group(1) if m else None


def find_function(code: str, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The last top-level definition of `name` in parseable `code` (the one Python keeps)."""
    try:
        tree = parse_code(code)
    except SyntaxError:
        return None
    found = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            found = node
    return found


def function_status(code: str, name: str) -> tuple[bool, bool]:
    """(defined, has a return with a value) for top-level function `name`.

    Level 1 of the reward, which the reference checks on text so that a function with a syntax
    error still counts as defined (the syntax level then fails it). Parseable chunks are checked
    on the tree: any `return <value>` in the function's body, nested blocks included. A chunk that
    does not parse falls back to a line starting with `return` followed by something, with
    comment lines ignored.
    """
    defined = has_return = False
    for chunk in top_level_chunks(code):
        if _function_name(chunk) != name:
            continue
        defined = True  # the last definition decides, as it is the one Python keeps
        try:
            fn = parse_code(chunk)
            has_return = any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(fn))
        except SyntaxError:
            has_return = any(_RETURN_LINE.match(ln) for ln in chunk.splitlines()[1:]
                             if not ln.lstrip().startswith("#"))
    return defined, has_return


def _is_call_to(node: ast.AST, helper: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == helper


def calls_helper(fn: ast.AST | None, helper: str) -> bool:
    """Main calls the helper somewhere in its body (nested functions and lambdas included)."""
    return fn is not None and any(_is_call_to(n, helper) for n in ast.walk(fn))


def _body_without_docstring(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.stmt]:
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    return body


def is_thin_wrapper(fn: ast.FunctionDef | ast.AsyncFunctionDef | None, helper: str) -> bool:
    """Main only forwards to the helper. Following the reference's rule, with statements in
    place of its text lines (docstring, comments and blank lines are not statements):

    - an empty body (only a docstring, or `pass`/`...`) is a wrapper;
    - a body of ONE statement that is a `return` whose expression mentions the helper is a
      wrapper, including `return aux(x) + 1` or `return sorted(aux(x))`: the reference counts
      any one-line `return` that contains the helper's name, however much else it does;
    - a body of TWO statements, `v = aux(...)` then `return v`, is a wrapper;
    - anything longer is not.
    """
    if fn is None:
        return False
    body = [s for s in _body_without_docstring(fn)
            if not (isinstance(s, ast.Pass) or (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant)))]
    if not body:
        return True
    if len(body) == 1:
        s = body[0]
        return isinstance(s, ast.Return) and s.value is not None and any(
            isinstance(n, ast.Name) and n.id == helper for n in ast.walk(s.value))
    if len(body) == 2:
        first, second = body
        return (isinstance(first, ast.Assign) and len(first.targets) == 1
                and isinstance(first.targets[0], ast.Name) and _is_call_to(first.value, helper)
                and isinstance(second, ast.Return) and isinstance(second.value, ast.Name)
                and second.value.id == first.targets[0].id)
    return False


def ignored_helper_calls(fn: ast.AST | None, helper: str) -> list[int]:
    """Line numbers of statements that call the helper and throw its result away (`aux(x)` as a
    statement on its own). This is the check the reference means to make; its pattern needs
    exactly one whitespace character between the name and `(` and a one-character argument,
    so it never fires on real code (the `fix_ignored_result` switch picks which one runs)."""
    if fn is None:
        return []
    return [n.lineno for n in ast.walk(fn) if isinstance(n, ast.Expr) and _is_call_to(n.value, helper)]


def syntax_error(code: str) -> str | None:
    """None if `code` parses, else "line L, column C: message"."""
    try:
        parse_code(code)
    except SyntaxError as e:
        return f"line {e.lineno}, column {e.offset}: {e.msg}"
    return None
