"""The package's import graph: every `import` in magrpo/, function-level ones included, read with
`ast` (nothing is imported). No module may reach itself through imports, the package's parts
(magrpo.X: a module or a sub-package) may form no circle, and no import may run upward against the
layers that docs/architecture.md draws (the page's table is read here, so page and code cannot
drift apart). A package's `__init__` importing its own modules (to register them) is not counted as
an edge."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "magrpo"

# Circles between parts still open (none: the reward functions, which wrap a task, live in
# magrpo.tasks.reward_fns; magrpo.rollout.rewards re-exports their public names).
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


# -- the layer order of docs/architecture.md -------------------------------------------------------

ARCHITECTURE = ROOT.parent / "docs" / "architecture.md"


def layers_from_docs(text: str) -> list[tuple[str, set[str]]]:
    """The layers of the table after `<!-- layers` on the architecture page, top first: (label, the
    package's parts it places). `name.py` and `name/` are parts; the words before a line's first part
    are its layer's label, and a line with no such words continues the layer above."""
    block = text.split("<!-- layers", 1)[1].split("```", 2)[1]
    layers: list[tuple[str, set[str]]] = []
    for line in block.splitlines()[2:]:                 # after the opening fence and the column heads
        if not line.strip():
            continue
        words = line.split()
        first = next((i for i, w in enumerate(words) if w.endswith((".py", "/"))), len(words))
        label = " ".join(words[:first])
        parts = {w.removesuffix(".py").removesuffix("/") for w in words[first:] if w.endswith((".py", "/"))}
        if label:
            layers.append((label, parts))
        else:
            layers[-1][1].update(parts)
    return layers


def upward(edges: dict[str, set[str]], layers: list[tuple[str, set[str]]]) -> list[str]:
    """Each import from a module to a part in a higher layer than its own, as 'a -> b (x above y)'."""
    rank = {p: i for i, (_, parts) in enumerate(layers) for p in parts}
    names = [label for label, _ in layers]
    out = []
    for m, deps in sorted(edges.items()):
        if part(m) == "__init__":
            continue
        for d in sorted(deps):
            if part(d) != "__init__" and rank[part(d)] < rank[part(m)]:
                out.append(f"{m} -> {d} ({names[rank[part(d)]]} above {names[rank[part(m)]]})")
    return out


def test_the_architecture_page_places_every_part_of_the_package_once():
    layers = layers_from_docs(ARCHITECTURE.read_text())
    assert len(layers) >= 8
    placed = [p for _, parts in layers for p in parts]
    assert len(placed) == len(set(placed)), "a part placed in two layers"
    parts = {part(m) for m in graph()} - {"__init__"}
    assert parts - set(placed) == set(), "parts the architecture page does not place"
    assert set(placed) - parts == set(), "the architecture page places parts that do not exist"


def test_no_import_runs_upward_against_the_layers_of_the_architecture_page():
    assert upward(graph(), layers_from_docs(ARCHITECTURE.read_text())) == []


def test_the_layer_check_finds_a_planted_upward_import():
    layers = layers_from_docs("<!-- layers -->\n```\n head\n top     a.py\n         b/\n bottom  c.py\n```\n")
    assert layers == [("top", {"a", "b"}), ("bottom", {"c"})]
    assert upward({"magrpo.a": {"magrpo.c", "magrpo.b.x"}, "magrpo.c": set()}, layers) == []
    assert upward({"magrpo.c": {"magrpo.b.x"}}, layers) == ["magrpo.c -> magrpo.b.x (top above bottom)"]


# -- imports inside functions: the allow-list -------------------------------------------------------

REASONS = ("start-up:", "optional:", "circle:", "effects:")
MOST_FUNCTION_LEVEL = 57       # the count now (72 when the allow-list was written); it may only go down


def function_level_imports() -> list[tuple[str, int, str]]:
    """(file, line, the text after `# noqa: PLC0415` on the import's last line) for every import
    inside a function in magrpo/."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    if isinstance(sub, (ast.Import, ast.ImportFrom)):
                        line = lines[sub.end_lineno - 1]
                        reason = line.split("# noqa: PLC0415", 1)[1].strip() if "# noqa: PLC0415" in line else ""
                        out.append((str(path.relative_to(ROOT.parent)), sub.lineno, reason))
    return sorted(set(out))          # an import in a nested function is walked from both functions


def test_every_import_inside_a_function_says_why_on_its_line():
    found = function_level_imports()
    assert len(found) > 20                       # the walk sees them (a broken walk would find none)
    bare = [f"{f}:{n}" for f, n, why in found if not why.startswith(REASONS) or len(why) < 20]
    assert bare == [], f"imports inside functions without a reason ({' / '.join(REASONS)} ...): {bare}"
    assert len(found) <= MOST_FUNCTION_LEVEL, f"{len(found)} imports inside functions (at most {MOST_FUNCTION_LEVEL})"


# -- the commands' home -----------------------------------------------------------------------------

def test_every_command_is_a_module_of_magrpo_cli():
    import tomllib

    scripts = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["project"]["scripts"]
    assert len(scripts) >= 10
    outside = {name: target for name, target in scripts.items() if not target.startswith("magrpo.cli.")}
    assert outside == {}
    for target in scripts.values():
        module = target.split(":")[0]
        assert (ROOT / "cli" / f"{module.rsplit('.', 1)[1]}.py").is_file(), target


def test_no_deprecation_layer_while_no_release_is_tagged():
    """Nothing is released (no git tag): a renamed name or key is renamed everywhere at once, so no
    module of the package warns of a deprecation, keeps an old path or folds an old key."""
    import subprocess

    tags = subprocess.run(["git", "tag"], cwd=ROOT.parent, capture_output=True, text=True).stdout.split()
    if tags:
        return      # once a release is tagged, a deprecation for one release is how a rename is done
    found = [f"{p.relative_to(ROOT.parent)}:{n}" for p in sorted(ROOT.rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"DeprecationWarning|FutureWarning\)|\bdeprecat", line, re.I) and "filterwarnings" not in line]
    assert found == []


def test_the_no_deprecation_check_finds_a_planted_one(tmp_path):
    import subprocess
    import sys

    planted = "import warnings\nwarnings.warn('old is deprecated', DeprecationWarning)\n"
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", planted], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode != 0 and "deprecated" in done.stderr
    assert re.search(r"DeprecationWarning|\bdeprecat", planted, re.I)


def test_importing_every_module_warns_of_no_deprecation():
    import subprocess
    import sys

    modules = sorted({".".join(p.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")
                      for p in ROOT.rglob("*.py") if p.name != "__main__.py"})
    code = "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules)
    done = subprocess.run([sys.executable, "-W", "error::DeprecationWarning:magrpo", "-c", code],
                          capture_output=True, text=True, timeout=300, cwd=ROOT.parent)
    assert done.returncode == 0, done.stderr[-2000:]
