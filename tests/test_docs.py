"""The docs cannot go stale: the site builds with --strict, the generated reference tables equal what
the code makes, every logged metric name is documented, and every command in the docs runs (the
README's tour, as printed) or is at least composed and validated."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser

from magrpo.config.schemas import CONF_DIR, EvalRunSchema
from magrpo.core.metric_names import METRICS, SUMMARY_KEYS, documented
from magrpo.core.schema import ConfigError
from magrpo.validation.checks import validate
from tests.conftest import compose_cfg

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
BIN = Path(sys.executable).parent


@functools.cache
def _load_script(name: str):
    """The script as a module, loaded once per process (its render() is cached)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the site and its generated tables -------------------------------------------------------------

@functools.cache
def _rendered_in_own_process() -> tuple[dict[str, str], list[str]]:
    """The generated tables and the keys they list without a description, rendered in an interpreter
    of its own, as `make docs-tables` does: a plugin that an earlier test of this worker imported has
    registered names (an advantage estimator, a task) the reference lists only where they are built in."""
    code = ("import json, runpy; ns = runpy.run_path('scripts/docs_tables.py', run_name='docs_tables'); "
            "print(json.dumps([ns['render'](), ns['undescribed']()]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MAGRPO_PLUGINS": "", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    tables, bare = json.loads(done.stdout.strip().splitlines()[-1])
    return tables, bare


def test_generated_reference_tables_match_the_code():
    tables, _ = _rendered_in_own_process()
    assert set(tables) == {"config.md", "algorithms.md", "tasks.md", "metrics.md"}
    for name, text in tables.items():
        committed = (ROOT / "docs" / "reference" / name).read_text()
        assert committed == text, f"docs/reference/{name} is stale: run `make docs-tables`"


def test_generated_tables_name_every_registered_algorithm_task_and_group_option():
    from magrpo.algos import ALGOS
    from magrpo.tasks import TASKS

    algos = (ROOT / "docs" / "reference" / "algorithms.md").read_text()
    tasks = (ROOT / "docs" / "reference" / "tasks.md").read_text()
    config = (ROOT / "docs" / "reference" / "config.md").read_text()
    # the built-in entries (a plugin another test of this worker imported is not the package's)
    builtin = {name for reg in (ALGOS, TASKS) for name, obj in reg.items() if obj.__module__.startswith("magrpo.")}
    assert len(builtin) > 20
    assert [n for n in ALGOS if n in builtin and f"## `algo={n}`" not in algos] == []
    assert [n for n in TASKS if n in builtin and f"## `task={n}`" not in tasks] == []
    for group in ("agents", "algo", "task", "feedback", "hardware", "logger", "optimizer"):
        for f in (Path(CONF_DIR) / group).glob("*.yaml"):
            assert f"`{f.stem}`" in config, (group, f.stem)


def test_every_key_in_the_reference_has_a_meaning():
    """Each key's meaning is its field's help (`option(..., help=...)`): a key listed in the reference
    without one is named here, read from the fields' metadata as the tables are rendered."""
    tables, bare = _rendered_in_own_process()
    assert not bare, "keys without a help= on their dataclass field:\n" + "\n".join(bare)
    rows = [line for name in ("config.md", "algorithms.md", "tasks.md") for line in tables[name].splitlines()
            if line.startswith("| `")]
    assert len(rows) > 300


def test_a_key_without_help_fails_the_tables_naming_it(tmp_path, capsys):
    # A planted schema: one key described, one without help, and a subclass that only changes the
    # described key's default (it keeps its parent's help). The script names the bare key and fails.
    import dataclasses

    from magrpo.core.schema import at_least, option

    @dataclasses.dataclass
    class PlantedConfig:
        rounds: int = at_least(1, 3, help="rounds per item")
        bare: int = 0
        noted: str = option("x", help="a note")

    @dataclasses.dataclass
    class PlantedChild(PlantedConfig):
        rounds: int = 5

    spec = importlib.util.spec_from_file_location("docs_tables_planted", ROOT / "scripts" / "docs_tables.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.PAGES = {"planted.md": lambda: script.key_table(PlantedChild, "task.")}
    script.BLOCKS = {}
    assert script.main(["--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "`task.bare`" in err and "PlantedChild" in err and "task.rounds" not in err and "task.noted" not in err
    rows = {line.split(" | ")[0]: line for line in (tmp_path / "planted.md").read_text().splitlines()}
    assert rows["| `task.rounds`"].startswith("| `task.rounds` | `5` |")
    assert rows["| `task.rounds`"].endswith("| rounds per item |") and rows["| `task.noted`"].endswith("| a note |")
    assert rows["| `task.bare`"].endswith("|  |")
    script.PAGES = {"planted.md": lambda: script.key_table(PlantedConfig, "task.", frozenset({"bare"}))}
    script._rendered.cache_clear()
    assert script.main(["--out", str(tmp_path)]) == 0           # the bare key not listed: nothing to describe


def test_the_stale_check_names_the_file(tmp_path):
    out = tmp_path / "reference"
    script = _load_script("docs_tables")
    assert script.main(["--out", str(out)]) == 0
    (out / "metrics.md").write_text("old\n")
    assert script.main(["--check", "--out", str(out)]) == 1


def test_the_site_builds_strict_offline(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([str(BIN / "mkdocs"), "build", "--strict", "--quiet", "-d", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "api.html").is_file()
    api = (tmp_path / "site" / "reference" / "api.html").read_text()
    assert "from_pretrained" in api and "check_task" in api        # mkdocstrings rendered the docstrings
    # From the file system: search's index ships as a script (the offline plugin), and the 404 page's
    # links are relative to the site's root, where it sits.
    assert (tmp_path / "site" / "search" / "search_index.js").is_file()
    missing = (tmp_path / "site" / "404.html").read_text()
    assert 'href="./index.html"' in missing and not re.search(r'(href|src)="/(?!/)', missing)
    # No page loads a script or a stylesheet from the network: search's Web Worker shim for file:// is
    # the site's own copy, and the site-only blocks (`<!-- site: ... -->`) were rendered, not shown
    for page in (tmp_path / "site").rglob("*.html"):
        text = page.read_text()
        remote = re.findall(r'<(?:script[^>]*\bsrc|link[^>]*\bhref)="(https?:[^"]*)"', text)
        assert not [u for u in remote if not u.startswith("https://squidfunk.github.io")], (page, remote)
        assert "<!-- site:" not in text and "\n::: " not in text, page
    assert "assets/javascripts/iframe-worker/shim.js" in (tmp_path / "site" / "index.html").read_text()
    assert api.count("Training from Python, no Hydra knowledge needed") == 1     # a module docstring it points to
    magrpo_page = (tmp_path / "site" / "algorithms" / "magrpo.html").read_text()
    assert re.search(r'<details class="quote">\s*<summary>The module docstring of magrpo/algos/magrpo.py</summary>',
                     magrpo_page)


def test_site_only_blocks_are_hidden_on_the_forge_and_unwrapped_for_the_site():
    """An mkdocstrings directive or a collapsible block would show as bare text where the Markdown is
    read on the forge: every one sits in a `<!-- site: ... -->` comment, which the site's hook unwraps."""
    hooks = _load_script("mkdocs_hooks")
    page = "Text.\n\n<!-- site:\n::: magrpo.team.team.Team\n    options:\n      members: false\n-->\n\nMore.\n"
    assert hooks.site_only(page) == "Text.\n\n::: magrpo.team.team.Team\n    options:\n      members: false\n\nMore.\n"
    bare = []
    for path in DOCS:
        forge = hooks.SITE_ONLY.sub("", path.read_text())
        bare += [f"{path.relative_to(ROOT)}: {line}" for line in forge.splitlines() if line.startswith((":::", "???", "!!!"))]
    assert bare == []


def _is_module(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def test_the_api_reference_renders_the_module_docstrings_its_docstrings_point_to():
    """A docstring on the API page that says "(module docstring)" refers to text the page shows."""
    hooks = _load_script("mkdocs_hooks")
    markdown = hooks.site_only((ROOT / "docs" / "reference" / "api.md").read_text())
    rendered = re.findall(r"^::: (\S+)(?:\n    options:\n      members: \[([^\]]*)\])?", markdown, re.MULTILINE)
    assert len(rendered) >= 15
    objects = []
    for name, members in rendered:
        if _is_module(name):
            objects += [(name, f"{name}.{m.strip()}") for m in members.split(",") if m.strip()]
        else:
            objects.append((None, name))
    pointing = []
    for module_shown, dotted in objects:
        module, _, attr = dotted.rpartition(".")
        obj = getattr(importlib.import_module(module), attr, None)
        docs = [obj.__doc__ or ""] + [getattr(v, "__doc__", "") or "" for v in vars(obj).values()] \
            if isinstance(obj, type) else [getattr(obj, "__doc__", "") or ""]
        if any("module docstring" in d for d in docs):
            pointing.append(dotted)
            assert module_shown == module, f"{dotted}'s docstring points to {module}'s, which the page does not render"
    assert {"magrpo.experiment.Experiment", "magrpo.team.team.Team", "magrpo.core.registry.Registry",
            "magrpo.core.schema.option"} <= set(pointing)


def _site_checker():
    checker = _load_script("check_site")
    return checker, checker.find_browser(os.environ.get("MAGRPO_BROWSER"))


@pytest.mark.slow
def test_every_page_of_the_site_loads_with_its_math_typeset_and_its_images_in_a_headless_browser(tmp_path):
    # The built site as a reader's browser shows it (Chromium, headless): every page loads, every
    # formula is typeset by the site's KaTeX with no error, every image loads, no script fails.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "HF_HUB_OFFLINE": "1"}
    site = tmp_path / "site"
    done = subprocess.run([str(BIN / "mkdocs"), "build", "--strict", "--quiet", "-d", str(site)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    checker, browser = _site_checker()
    results, failing = checker.check(site, browser)
    assert failing == []
    assert len(results) == len(checker.pages_of(site)) >= 30
    by_page = {r["page"]: r for r in results}
    assert by_page["algorithms/magrpo.html"]["math"] >= 3
    assert sum(r["images"] for r in results) >= 10


@pytest.mark.slow
def test_the_site_check_reports_a_bad_formula_a_missing_image_and_a_script_error(tmp_path):
    site = tmp_path / "site"
    (site / "assets").mkdir(parents=True)
    for asset in ("assets/katex/katex.min.js", "assets/katex/katex.min.css", "assets/javascripts/katex-init.js"):
        (site / asset).parent.mkdir(parents=True, exist_ok=True)
        (site / asset).write_bytes((ROOT / "docs" / asset).read_bytes())
    head = ('<head><meta charset="utf-8"><title>{t}</title><link rel="stylesheet" href="assets/katex/katex.min.css">'
            '<script src="assets/katex/katex.min.js"></script><script src="assets/javascripts/katex-init.js"></script>'
            '</head>')
    (site / "good.html").write_text("<!doctype html><html>" + head.format(t="good") + r'<body><span class="arithmatex">\(x^2\)</span>'
                                    "</body></html>")
    (site / "bad.html").write_text("<!doctype html><html>" + head.format(t="bad") + r'<body><span class="arithmatex">\(\frac{1}{\)'
                                   '</span><img src="missing.png"><script>undefinedFunction()</script></body></html>')
    checker, browser = _site_checker()
    results, failing = checker.check(site, browser, settle_ms=4000)
    assert {r["page"] for r in results} == {"good.html", "bad.html"}
    assert len(failing) == 1 and failing[0].startswith("bad.html: ")
    assert "KaTeX could not read" in failing[0] and "missing.png" in failing[0] and "undefinedFunction" in failing[0]


def test_the_architecture_picture_shows_every_part_of_the_package_and_no_upward_import():
    # docs/assets/img/architecture.svg is drawn by `scripts/docs_figures.py architecture` from the
    # page's table and the source's imports; a part added, moved or removed without redrawing it fails.
    from tests.test_layers import ARCHITECTURE, graph, layers_from_docs, part

    svg = (ROOT / "docs" / "assets" / "img" / "architecture.svg").read_text()
    texts = re.findall(r"<text[^>]*>([^<]+)</text>", svg)
    parts = {part(m) for m in graph()} - {"__init__"}
    shown = {t.removesuffix(".py").removesuffix("/") for t in texts if t.endswith((".py", "/"))}
    assert shown == parts
    words = [w for label, _ in layers_from_docs(ARCHITECTURE.read_text()) for w in label.split()]
    assert [t for t in texts if t in set(words)] == words          # the layers (a line a word), in the page's order
    assert any(re.search(r"\b0 upward\b", t) for t in texts)
    assert "](assets/img/architecture.svg)" in ARCHITECTURE.read_text()


def test_the_architecture_pictures_labels_read_at_the_pages_width_and_fit_their_boxes(tmp_path):
    """Every label is at least SMALLEST_LABEL_PX when the picture is shown PAGE_WIDTH_PX wide (they were
    about 6 px), and drawing it checks that each name fits inside its box (one ran over its border)."""
    figures = _load_script("docs_figures")
    svg = (ROOT / "docs" / "assets" / "img" / "architecture.svg").read_text()
    width = float(re.search(r'<svg[^>]*\bwidth="([0-9.]+)pt"', svg).group(1))
    sizes = [float(x) for x in re.findall(r"font-size: ([0-9.]+)px", svg)]
    assert len(sizes) > 20        # a label for each layer and each part
    assert min(sizes) * figures.PAGE_WIDTH_PX / width >= figures.SMALLEST_LABEL_PX
    drawn = figures.draw_architecture(tmp_path / "architecture.svg")      # raises where a name overflows
    assert re.findall(r"<text[^>]*>([^<]+)</text>", drawn.read_text()) == re.findall(r"<text[^>]*>([^<]+)</text>", svg)


def test_readme_fits_on_a_few_screens():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 150, len(lines)


# -- metric names ------------------------------------------------------------------------------------

FAST = ["algo.max_new_tokens=8", "eval.num_items=2", "eval.num_samples=2", "algo.batch_size=2",
        "algo.num_generations=2", "max_steps=1", "eval.every=1", "save_final=false"]


@pytest.fixture(scope="module")
def logged(tmp_path_factory) -> dict[str, tuple[set[str], dict]]:
    """{run: (the metric names it logged, its summary.json)} for one step of every algorithm and the
    variants that add names (DAPO, two turns, a shared policy, diagnostics on a chain)."""
    from magrpo.algos import ALGOS
    from magrpo.cli.train import run

    runs = {**{a: [f"algo={a}"] for a in ALGOS},
            "dapo": ["algo.dynamic_sampling=true", "algo.overlong_penalty=1"],
            "two_turn": ["algo.num_turns=2", "feedback=plain"], "shared": ["agents.share_policy=true"],
            "diagnostics": ["eval.diagnostics=true", "algo.topology=sequential"]}
    out = {}
    for name, overrides in runs.items():
        d = tmp_path_factory.mktemp(name)
        run(compose_cfg([*overrides, *FAST, f"output_dir={d}"]))
        names = {k for line in (d / "metrics.jsonl").read_text().splitlines() for k in json.loads(line)}
        out[name] = (names, json.loads((d / "summary.json").read_text()))
    return out


def test_every_logged_name_is_in_the_catalogue(logged):
    missing = sorted({(k, run) for run, (names, _) in logged.items() for k in names if documented(k) is None})
    assert not missing, f"logged but not in magrpo/core/metric_names.py: {missing}"


def test_every_name_the_catalogue_promises_an_algorithm_is_logged(logged):
    for metric in METRICS:
        for algo in metric.algos:
            names = logged[algo][0]
            assert any(metric.pattern().match(k) for k in names), (metric.name, algo)


def test_every_summary_key_is_documented(logged):
    for run, (_, summary) in logged.items():
        assert set(summary) <= set(SUMMARY_KEYS), (run, set(summary) - set(SUMMARY_KEYS))


# -- commands in the docs ----------------------------------------------------------------------------

BLOCK = re.compile(r"(?:<!-- (?P<mark>[\w:.\-]+) -->\n)?```(?:bash|sh|shell)\n(?P<body>.*?)```", re.S)
ENTRY_POINTS = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])
MODULE_OF = {"magrpo-table": "magrpo/table", "magrpo-score": "magrpo/cli/score.py", "magrpo-paper": "magrpo/cli/paper.py",
             "magrpo-dashboard": "magrpo/cli/dashboard.py", "magrpo-export": "magrpo/cli/export.py",
             "magrpo-crossplay": "magrpo/cli/crossplay.py", "magrpo-trust": "magrpo/cli/trust.py",
             "magrpo-population": "magrpo/cli/population.py", "magrpo-train": "magrpo",
             "magrpo-eval": "magrpo"}
OTHER_PROGRAMS = {"pip", "python", "python3", "hf", "wandb", "torchrun", "sh", "bash", "export", "for", "cd", "srun",
                  "sbatch", "HF_HUB_OFFLINE=1", "git", "ls", "cat", "mkdir"}
USER_CODE = ("PYTHONPATH=", "MAGRPO_PLUGINS=", "plugins=", "reward.fn=", "reward.fns=")


def doc_commands() -> list[tuple[str, str, str]]:
    """(file, mark, one command line) for every command of every bash block of the docs and README,
    continuation lines joined and comments dropped."""
    out = []
    for path in DOCS:
        for m in BLOCK.finditer(path.read_text()):
            text = re.sub(r"\\\n\s*", " ", m.group("body"))
            for line in text.splitlines():
                line = line.split(" # ")[0].strip() if not line.strip().startswith("#") else ""
                if line:
                    out.append((str(path.relative_to(ROOT)), m.group("mark") or "", line))
    return out


COMMANDS = doc_commands()


def _words(line: str) -> list[str]:
    words = shlex.split(line.replace("$(", "(").split(";")[-1] if line.startswith("for ") else line)
    while words and re.match(r"^[A-Z_]+=", words[0]):          # VAR=value prefixes
        words = words[1:]
    return [w.removeprefix(".venv/bin/") for w in words]


def _first_of_sweeps(overrides: list[str]) -> list[str]:
    """A sweep's first job: `a=x,y` -> `a=x` (lists and quoted values untouched)."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    out = []
    for text, o in zip(overrides, parsed):
        if o.is_sweep_override():
            first = next(iter(o.sweep_string_iterator()))
            out.append(f"{o.get_key_element()}={first}")
        else:
            out.append(text)
    return out


def _compose_and_validate(program: str, args: list[str], illustrative: bool = False) -> None:
    import magrpo.config.schemas as config

    overrides = [a for a in args if a not in ("-m", "--multirun") and not a.startswith("-")
                 and "<" not in a and a.split("=")[0].lstrip("+~") not in ("resume", "checkpoint", "team")
                 and not a.startswith(("hydra.", "hydra/", "hparams_search"))]
    overrides = _first_of_sweeps(overrides)
    if not any(o.startswith("output_dir=") for o in overrides):
        overrides.append("output_dir=/nonexistent/docs-check")       # what hydra.run.dir would give
    name = "eval" if program == "magrpo-eval" else "train"
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name=name, overrides=overrides)
    saved = config._check_device_available
    config._check_device_available = lambda key, dev: None     # a GPU command is validated on a CPU machine
    try:
        validate(cfg, EvalRunSchema) if name == "eval" else validate(cfg)
    except ConfigError as e:
        # an illustrative block (another machine's files) may name a path this machine lacks: that
        # error, naming one of the command's own paths, is the only one it may raise
        named = re.search(r"=\'([^\']+)\': no such file or directory", str(e))
        if not (illustrative and named and named.group(1) in " ".join(args)):
            raise
    finally:
        config._check_device_available = saved


def _flags_exist(program: str, args: list[str]) -> None:
    where = ROOT / MODULE_OF[program]
    source = "".join(p.read_text() for p in ([where] if where.is_file() else where.rglob("*.py")))
    for flag in (a.split("=")[0] for a in args if a.startswith("--") and a != "--help"):
        assert f'"{flag}"' in source, f"{program} has no option {flag}"


def _make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


@pytest.mark.parametrize("where,mark,line", COMMANDS, ids=[f"{w}:{i}" for i, (w, _, _) in enumerate(COMMANDS)])
def test_every_command_in_the_docs_is_real(where, mark, line):
    """A make target exists; a magrpo-* command's options exist; magrpo-train and magrpo-eval lines
    compose and validate (a run's path, a placeholder and hydra.* are left out: blocks that need them
    run for real, the README's tour here and the Extending page's in test_extending)."""
    words = _words(line)
    if not words:
        return
    program, args = words[0], words[1:]
    if program == "make":
        targets = [a for a in args if "=" not in a]
        assert set(targets) <= _make_targets(), (line, set(targets) - _make_targets())
    elif program in ENTRY_POINTS:
        _flags_exist(program, args)
        if program in ("magrpo-train", "magrpo-eval") and not any(u in line for u in USER_CODE) \
                and "--help" not in args and mark != "docs:run" and not mark.startswith("extending"):
            _compose_and_validate(program, args, illustrative=mark == "docs:illustrative")
        if program == "magrpo-population":          # its KEY=VALUE words are magrpo-train's overrides
            _compose_and_validate("magrpo-train", [a for a in args if "=" in a and not a.startswith("-")])
    elif program in ("python", "python3") and args[:1] == ["-m"]:
        module = args[1]
        if module.startswith("magrpo"):
            assert importlib.util.find_spec(module) is not None, line
    elif program in ("python", "python3") and args and args[0].endswith(".py") and args[0].startswith("scripts/"):
        assert (ROOT / args[0]).is_file(), line
    else:
        assert program in OTHER_PROGRAMS or program.startswith(("./", "/")) or "=" in program or program in (
            "magrpo-export", "run.sh", "done", "do", "echo"), f"{where}: unknown program in {line!r}"


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "PYTHONWARNINGS": "ignore",
            "PYTHONPATH": "", "MAGRPO_PLUGINS": ""}


def _readme_tour() -> tuple[str, str]:
    """The README's tour: its shell block and the Python block after it."""
    text = (ROOT / "README.md").read_text()
    tour = re.search(r"<!-- docs:run -->\n```bash\n(.*?)```", text, re.S).group(1)
    python = re.search(r"```python\n(from magrpo import Team.*?)```", text, re.S).group(1)
    return tour, python


def _check_tour_outputs(folder: Path) -> None:
    assert json.loads((folder / "runs" / "first" / "summary.json").read_text())["status"] == "finished"
    assert len(list((folder / "runs" / "sweep").glob("*/summary.json"))) == 2
    rows = (folder / "tables" / "table.md").read_text()
    # the sweep's two seeds, once each: not runs/first (seed 0 again) nor the evaluation as a method
    assert "| magrpo | 2 |" in rows and "| team |" not in rows
    assert (folder / "teams" / "first" / "team.json").is_file()


def test_the_readme_tour_runs_in_this_process(tmp_path, monkeypatch, capsys):
    # Each line of the tour, word for word, through the entry point its program names in
    # pyproject.toml (the same argv a shell would hand it), then the Python block: what the tour
    # does, without an interpreter start per line. The slow suite runs it in bash as printed.
    from tests.conftest import run_cli

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    tour, python = _readme_tour()
    monkeypatch.chdir(tmp_path)
    lines = [ln.split("#")[0].strip() for ln in tour.splitlines()]
    assert len([ln for ln in lines if ln]) >= 5
    for line in filter(None, lines):
        program, *args = shlex.split(line)
        module, func = scripts[program].split(":")
        main = getattr(importlib.import_module(module), func)
        hydra_app = program in ("magrpo-train", "magrpo-eval")
        code = run_cli(main, program, args) if hydra_app else main(args)
        assert code in (0, None), (line, capsys.readouterr().err[-3000:])
    _check_tour_outputs(tmp_path)
    exec(compile(python, "README.md", "exec"), {})
    assert capsys.readouterr().out.strip()


@pytest.mark.slow
def test_the_readme_tour_runs_as_printed(tmp_path):
    tour, python = _readme_tour()
    done = subprocess.run(["bash", "-e", "-c", tour], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    _check_tour_outputs(tmp_path)
    py = subprocess.run([sys.executable, "-c", python], cwd=tmp_path, env=_env(), capture_output=True, text=True,
                        timeout=600)
    assert py.returncode == 0, py.stderr[-3000:]


def test_generated_reference_rows_each_describe_their_own_class():
    # Each algorithm's and each task's row is its own class's summary (or its module's), never a
    # base class's inherited docstring: no two rows of one table may share a description.
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_tables", Path(__file__).resolve().parent.parent / "scripts"
                                                  / "docs_tables.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for page, column in ((mod.algorithms_page(), 2), (mod.tasks_page(), 1)):
        head = page.split("\n## ")[0]
        rows = [line.split(" | ") for line in head.splitlines() if line.startswith("| `")]
        described = [r[column].strip(" |") for r in rows]
        assert len(rows) >= 10 and all(described)
        twice = {d for d in described if described.count(d) > 1}
        assert not twice, twice
        assert not any(d.startswith(("Set-up, collection", "Base class")) for d in described)


def test_every_pointer_in_code_and_config_names_a_docs_page_that_exists():
    # Messages, --help texts and docstrings point readers to docs pages (docs/X.md, "Section"):
    # each page must exist and each named section must be one of its headings; none points to a
    # README section any more (the README is the entry point; its sections moved to docs/).
    import re

    root = Path(__file__).resolve().parent.parent
    files = [*root.glob("magrpo/**/*.py"), *root.glob("conf/**/*.yaml"), *root.glob("scripts/*.py")]
    pointer = re.compile(r'(docs/[\w/.-]+\.md)(?:,\s*\\?"([^"\\]+)\\?")?')
    seen, bad = 0, []
    for f in files:
        text = f.read_text()
        text_one_line = re.sub(r"\s*\n\s*#?\s*", " ", text)       # a section name wrapped over two lines
        for page, section in pointer.findall(text_one_line):
            seen += 1
            path = root / page
            if not path.is_file():
                bad.append(f"{f.relative_to(root)}: {page} does not exist")
            elif section and not re.search(rf"^#+ .*{re.escape(section)}", path.read_text(), re.M):
                bad.append(f"{f.relative_to(root)}: {page} has no heading {section!r}")
        for m in re.finditer(r"README(?:,|'s| \")\s*\"?[A-Z]", text):
            bad.append(f"{f.relative_to(root)}: points to a README section: {text[m.start():m.end() + 30]!r}")
    assert seen >= 20 and not bad, bad


def test_the_license_file_is_the_license_pyproject_declares():
    import tomllib

    root = Path(__file__).resolve().parent.parent
    declared = tomllib.loads((root / "pyproject.toml").read_text())["project"]["license"]
    text = (root / "LICENSE").read_text()
    assert declared == "Apache-2.0" and text.lstrip().startswith("Apache License") and "Version 2.0" in text[:200]
    assert "END OF TERMS AND CONDITIONS" in text


def test_the_api_page_documents_every_public_name():
    # Everything `from magrpo import ...` offers is on the Python API page (Team.answer and
    # TeamAnswer were missing), and each documented method has a docstring to render.
    import magrpo
    from magrpo.team.team import Team

    text = (ROOT / "docs" / "reference" / "api.md").read_text()
    assert [n for n in magrpo.__all__ if n not in text] == []
    assert re.search(r"^::: magrpo\.team\.team\n    options:\n      members: \[Team, TeamAnswer\]", text, re.MULTILINE)
    assert Team.answer.__doc__ and Team.answer_batch.__doc__


def test_every_algorithm_page_opens_with_its_loss_typeset_by_the_sites_own_katex():
    # Each trainer's page starts with "## The loss" holding display math ($$...$$), which the
    # site's own KaTeX copy renders (no CDN: the site reads offline and from file://); every font
    # its stylesheet names ships with it.
    import yaml

    cfg = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    scripts, styles = cfg["extra_javascript"], cfg["extra_css"]
    assert all(not s.startswith(("http:", "https:", "//")) for s in [*scripts, *styles])
    for asset in [*scripts, *styles]:
        assert (ROOT / "docs" / asset).is_file(), asset
    assert any(s.endswith("katex.min.js") for s in scripts) and any(s.endswith("katex.min.css") for s in styles)
    css = (ROOT / "docs" / "assets" / "katex" / "katex.min.css").read_text()
    fonts = re.findall(r"url\((fonts/[^)]+)\)", css)
    assert fonts and all((ROOT / "docs" / "assets" / "katex" / f).is_file() for f in fonts)
    pages = [p for p in (ROOT / "docs" / "algorithms").glob("*.md") if p.stem not in ("index", "prompting")]
    assert len(pages) >= 10
    for page in pages:
        text = page.read_text()
        first_section = text.split("\n## ", 2)[1]
        assert first_section.startswith("The loss\n"), page.name
        assert re.search(r"\$\$\n.+?\n\$\$", first_section, re.S), page.name


def test_every_algorithm_page_shows_a_measured_learning_curve():
    # Each trainer's page has a "Learning curve" section whose pictures exist, were drawn from runs
    # (scripts/docs_figures.py curves: the games' names and the seed count are in the picture), and
    # say the command that made them.
    pages = [p for p in (ROOT / "docs" / "algorithms").glob("*.md") if p.stem not in ("index", "prompting")]
    for page in pages:
        text = page.read_text()
        section = text.split("\n## Learning curve\n", 1)[1].split("\n## ", 1)[0]
        pictures = re.findall(r"!\[[^\]]+\]\((\.\./assets/img/curves/[a-z0-9_]+\.svg)\)", section)
        assert pictures, page.name
        assert "scripts/docs_figures.py curves" in section, page.name
        for picture in pictures:
            svg = (page.parent / picture).resolve().read_text()
            assert all(f">{game}<" in svg for game in ("agree", "cover", "stag_hunt")), picture
            assert re.search(r"\(n=[1-9]\)<", svg), picture


def _headings(text: str) -> list[tuple[int, str]]:
    out, fence = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and (m := re.match(r"^(#{1,6}) (.+)", line)):
            out.append((len(m.group(1)), m.group(2).strip()))
    return out


def test_every_page_has_one_title_then_an_overview_then_sections_in_order():
    """One H1 first; some text before the first section; no section repeats the title; no level is
    skipped (no page opens on an H3)."""
    bad = []
    for page in sorted((ROOT / "docs").rglob("*.md")):
        if "assets" in page.parts:
            continue
        text = page.read_text()
        heads = _headings(text)
        name = str(page.relative_to(ROOT))
        if not heads or heads[0][0] != 1 or sum(level == 1 for level, _ in heads) != 1:
            bad.append(f"{name}: one H1, first")
            continue
        if any(level == 2 and title.lower() == heads[0][1].lower() for level, title in heads):
            bad.append(f"{name}: a section repeats the title")
        if any(b[0] > a[0] + 1 for a, b in zip(heads, heads[1:])):
            bad.append(f"{name}: a heading level is skipped")
        lines = text.splitlines()
        start = next(k for k, line in enumerate(lines) if line.startswith("# "))
        stop = next((k for k in range(start + 1, len(lines)) if re.match(r"^#{2,6} ", lines[k])), len(lines))
        if not any(line.strip() for line in lines[start + 1:stop]):
            bad.append(f"{name}: no overview before the first section")
    assert bad == []


def test_numbers_the_pages_and_help_give_agree_with_the_code():
    """`make test`'s time is the same wherever it is given; --help's count of the suite's games is
    the coordination table's."""
    from magrpo.launch.paper_grid import TABLES

    minutes = {p: re.findall(r"make test +# the test suite \(about (\d+) minutes", (ROOT / p).read_text())
               for p in ("README.md", "docs/quickstart.md")}
    assert all(minutes.values()) and len({m[0] for m in minutes.values()}) == 1, minutes
    help_text = (ROOT / "conf" / "hydra" / "help" / "magrpo.yaml").read_text()
    counts = re.findall(r"coordination suite's (\d+) games", help_text)
    assert counts == [str(len(TABLES["coordination"].tasks))]


def test_the_quickstart_names_every_make_target():
    """`make help`'s targets (each `target: ... ## text` in the Makefile) are the ones the quickstart names."""
    targets = re.findall(r"^([a-z][a-z-]*):[^#\n]*## ", (ROOT / "Makefile").read_text(), re.M)
    line = next(x for x in (ROOT / "docs" / "quickstart.md").read_text().splitlines()
                if x.startswith("`make help` lists every target"))
    assert set(re.findall(r"`([a-z-]+)`", line)) == set(targets) - {"help", "train", "test"}


def test_the_readme_tour_says_how_to_reach_the_commands_as_the_quickstart_does():
    path_line = 'put them on your\n`PATH` with `source .venv/bin/activate` (or `export PATH="$PWD/.venv/bin:$PATH"`'
    readme = (ROOT / "README.md").read_text().split("## A short tour", 1)[1].split("```", 1)[0]
    quickstart = (ROOT / "docs" / "quickstart.md").read_text().split("## A short tour", 1)[1].split("```", 1)[0]
    for text in (readme, quickstart):
        assert " ".join(path_line.split()) in " ".join(text.split())


def test_the_benchmarks_page_opens_with_results_and_ends_with_the_test_suite():
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    sections = re.findall(r"^## (.+)$", text, re.MULTILINE)
    assert sections[0] == "The coordination games at 5 seeds" and sections[-1] == "The test suite"
    before = text.split("\n## ", 1)[0]
    assert len(before.split()) < 80                  # the title and one paragraph, then a result
