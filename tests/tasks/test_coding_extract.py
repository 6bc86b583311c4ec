"""Code extraction from model answers and the static checks behind the coding reward."""

from __future__ import annotations

from magrpo.tasks.coding import analysis
from magrpo.tasks.coding.extract import build_program, extract_code, strip_fences


def fn(code: str, name: str = "f"):
    return analysis.find_function(code, name)


# -- fences and prose -------------------------------------------------------------------------


def test_several_fenced_blocks_are_joined_and_other_languages_ignored():
    text = ("Here is the helper:\n\n```python\nimport math\n\ndef aux(n):\n    return math.sqrt(n)\n```\n\n"
            "Output:\n```text\n3.0\n```\nand more:\n```py\ndef g():\n    return 1\n```\nDone.")
    code = extract_code(text)
    assert code == "import math\n\ndef aux(n):\n    return math.sqrt(n)\n\ndef g():\n    return 1"


def test_unclosed_fence_runs_to_the_end():
    text = "Sure.\n```python\ndef aux(x):\n    return x * 2\n"
    assert extract_code(text) == "def aux(x):\n    return x * 2"


def test_stray_closing_fence_and_no_fence_at_all():
    assert extract_code("def aux(x):\n    return x\n```") == "def aux(x):\n    return x"
    assert extract_code("def aux(x):\n    return x\n") == "def aux(x):\n    return x"


def test_indented_fenced_block_is_dedented():
    text = "1. Code:\n   ```python\n   def aux(x):\n       return x\n   ```\n"
    assert extract_code(text) == "def aux(x):\n    return x"


def test_prose_example_calls_and_main_guard_are_dropped_constants_and_imports_kept():
    text = ("I will write the function now.\n"
            "from collections import Counter\n"
            "MOD = 10**9 + 7\n"
            "def f(xs):\n    c = Counter(xs)\n    return max(c.values()) % MOD\n"
            "This works because Counter counts.\n"
            "print(f([1, 1, 2]))\n"
            "assert f([1]) == 1\n"
            "r = f([3])\n"
            "if __name__ == '__main__':\n    print(f([2]))\n")
    code = extract_code(text)
    assert code == ("from collections import Counter\n\nMOD = 10**9 + 7\n\n"
                    "def f(xs):\n    c = Counter(xs)\n    return max(c.values()) % MOD")


def test_broken_def_is_kept_so_the_syntax_level_sees_it():
    text = "Answer:\ndef f(x):\n    return x +\nThat is all.\n"
    code = extract_code(text)
    assert code == "def f(x):\n    return x +"
    assert analysis.syntax_error(code).startswith("line 2")


def test_decorated_function_keeps_its_decorator():
    text = "```python\nimport functools\n@functools.lru_cache(None)\ndef aux(n):\n    return n if n < 2 else aux(n - 1) + aux(n - 2)\n```"
    assert "@functools.lru_cache(None)\ndef aux(n):" in extract_code(text)


def test_strip_fences_leaves_bare_text_alone():
    assert strip_fences("def f():\n    return 1") == "def f():\n    return 1"


# -- roles ------------------------------------------------------------------------------------


def test_main_answer_redefining_aux_loses_the_redefinition():
    helper = "```python\ndef aux(x):\n    return x + 1\n```"
    main = ("```python\ndef aux(x):\n    return 0\n\ndef f(x):\n    return aux(x) * 2\n```")
    prog = build_program([helper, main], "f", imports="from typing import List")
    assert prog.main_code == "def f(x):\n    return aux(x) * 2"
    ns: dict = {}
    exec(prog.source, ns)
    assert ns["f"](1) == 4  # agent 1's aux ran
    assert prog.source.startswith("from typing import List\n\ndef aux(x):")


def test_helper_answer_keeps_its_sub_helpers_but_not_the_entry_point():
    helper = ("def _is_prime(n):\n    return n > 1 and all(n % d for d in range(2, n))\n\n"
              "def aux(n):\n    return [p for p in range(n) if _is_prime(p)]\n\n"
              "def f(n):\n    return None\n")
    prog = build_program([helper, "def f(n):\n    return len(aux(n))"], "f")
    assert "_is_prime" in prog.aux_code and "def f" not in prog.aux_code
    ns: dict = {}
    exec(prog.source, ns)
    assert ns["f"](10) == 4


def test_repeated_prompt_signature_last_definition_wins():
    main = ('def f(x):\n    """Return x squared."""\n\n\n'
            'def f(x):\n    """Return x squared."""\n    return x * x\n')
    assert analysis.function_status(main, "f") == (True, True)
    assert analysis.function_status('def f(x):\n    """Only the stub."""\n', "f") == (True, False)


def test_single_agent_form_keeps_everything():
    text = "def aux(x):\n    return x\n\ndef f(x):\n    return aux(x) + 1\n"
    for completion in (text, [text]):
        prog = build_program(completion, "f")
        assert prog.aux_code == "" and "def aux" in prog.main_code and "def f" in prog.main_code


# -- static checks ----------------------------------------------------------------------------


def test_function_status_defined_return_and_unparseable_fallback():
    assert analysis.function_status("def g():\n    return 1", "f") == (False, False)
    assert analysis.function_status("def f():\n    print(1)", "f") == (True, False)
    assert analysis.function_status("def f():\n    return", "f") == (True, False)  # no value
    assert analysis.function_status("def f(x):\n    if x:\n        return [x", "f") == (True, True)
    assert analysis.function_status("def f(x):\n    # return x\n    y = (", "f") == (True, False)
    assert analysis.function_status("async def f():\n    return 1", "f") == (True, True)


def test_calls_helper():
    assert analysis.calls_helper(fn("def f(x):\n    return sum(map(lambda v: aux(v), x))"), "aux")
    assert not analysis.calls_helper(fn("def f(x):\n    # aux(x) would help\n    return x"), "aux")
    assert not analysis.calls_helper(fn("def f(x):\n    return auxiliary(x)"), "aux")


def test_thin_wrapper_rule():
    wrappers = [
        "def f(x):\n    return aux(x)",
        'def f(x):\n    """Doc."""\n    # forward\n    return aux(x)',
        "def f(x):\n    return aux(x) + 1",           # one return mentioning aux: wrapper, as in the reference
        "def f(x):\n    r = aux(x)\n    return r",
        "def f(x):\n    pass",
    ]
    not_wrappers = [
        "def f(x):\n    r = aux(x)\n    return r + 1",
        "def f(x):\n    y = x * 2\n    return aux(y)",
        "def f(x):\n    r = aux(x)\n    if r:\n        return r\n    return 0",
        "def f(x):\n    return x",
    ]
    for code in wrappers:
        assert analysis.is_thin_wrapper(fn(code), "aux"), code
    for code in not_wrappers:
        assert not analysis.is_thin_wrapper(fn(code), "aux"), code


def test_ignored_helper_calls():
    code = "def f(x):\n    aux(x)\n    for v in x:\n        aux(v)\n    y = aux(x)\n    return y"
    assert analysis.ignored_helper_calls(fn(code), "aux") == [2, 4]
    assert analysis.ignored_helper_calls(fn("def f(x):\n    return aux(x)"), "aux") == []


def test_syntax_error_message_has_line_and_column():
    msg = analysis.syntax_error("def f(:\n    return 1")
    assert msg.startswith("line 1, column") and analysis.syntax_error("x = 1") is None
