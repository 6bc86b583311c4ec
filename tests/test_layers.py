"""The package's import graph: every `import` in magrpo/, function-level ones included, read with
`ast` (nothing is imported). No module may reach itself through imports, and the package's parts
(magrpo.X: a module or a sub-package) may form no circle but the one still open (below). A
package's `__init__` importing its own modules (to register them) is not counted as an edge."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "magrpo"

# Circles between parts still open (none: the reward functions, which wrap a task, live in
# magrpo.tasks.reward_fns; magrpo.rewards re-exports their public names).
OPEN_PART_CIRCLES: set[frozenset[str]] = set()


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The magrpo modules `path` imports anywhere in its body (a `from X import y` counts X.y when
    that is a module, else X)."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "magrpo"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if base.split(".")[0] != "magrpo":
                continue
            for alias in node.names:
                out.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    own = path.name == "__init__.py"     # a package loading its own modules (to register them) is no circle
    return {m for m in out if m in modules and m != me and not (own and m.startswith(me + "."))}


def graph() -> dict[str, set[str]]:
    files = sorted(ROOT.rglob("*.py"))
    modules = {module_name(f) for f in files}
    return {module_name(f): imports_of(f, modules) for f in files}


def circles(edges: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def part(module: str) -> str:
    return module.split(".")[1] if module.count(".") else "__init__"


def test_no_module_reaches_itself_through_its_imports():
    edges = graph()
    assert len(edges) > 80
    assert circles(edges) == []


def test_the_parts_of_the_package_form_no_new_circle():
    edges: dict[str, set[str]] = {}
    for m, deps in graph().items():
        if part(m) == "__init__":       # the top-level package's lazy public names point everywhere
            continue
        edges.setdefault(part(m), set()).update(part(d) for d in deps if part(d) not in (part(m), "__init__"))
    found = {frozenset(c) for c in circles(edges)}
    assert found <= OPEN_PART_CIRCLES, found - OPEN_PART_CIRCLES


def test_the_circle_finder_finds_a_planted_circle():
    # the checks above can fail: a three-module circle and a self-contained chain
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
