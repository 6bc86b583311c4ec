"""The extension API from outside the repository: the docs' "Extending" page, run exactly as printed (slow:
nine fresh interpreters), and the plugin mechanism's refusals (magrpo.core.plugins, magrpo.core.registry)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from magrpo.core.schema import ConfigError
from tests import preloaded
from tests.test_artifact_safety import rehash

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "docs" / "extending.md"      # the page whose blocks run here as printed


def readme_block(marker: str) -> str:
    """The code block that follows `<!-- extending:MARKER -->` on the Extending page."""
    text = README.read_text()
    m = re.search(rf"<!-- extending:{re.escape(marker)} -->\n```[a-z]*\n(.*?)```", text, re.S)
    assert m, f"docs/extending.md has no block after <!-- extending:{marker} -->"
    return m.group(1)


def _env(folder: Path) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}", "PYTHONWARNINGS": "ignore",
            "PYTHONPATH": "", "MAGRPO_PLUGINS": ""}


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> Path:
    """A folder outside the repository holding the README's my_game.py, after the README's commands
    and its Python block ran there, as printed."""
    folder = tmp_path_factory.mktemp("outside")
    assert not folder.resolve().is_relative_to(ROOT)
    (folder / "my_game.py").write_text(readme_block("my_game.py"))
    commands = readme_block("commands")
    done = subprocess.run(["bash", "-e", "-c", commands], cwd=folder, env=_env(folder), capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    (folder / "example.py").write_text(readme_block("python"))
    env = {**_env(folder), "PYTHONPATH": str(folder)}
    py = subprocess.run([sys.executable, "example.py"], cwd=folder, env=env, capture_output=True, text=True,
                        timeout=600)
    assert py.returncode == 0, py.stderr[-3000:]
    (folder / "example.out").write_text(py.stdout)
    return folder


@pytest.fixture(scope="module")
def plugin_run(tmp_path_factory) -> Path:
    """A folder outside the repository holding the Extending page's my_game.py, the run of its first
    training command (runs/sum) and that run's export (exports/sum-team), those lines run as printed:
    what the trust tests below take up (the `outside` fixture runs every line, in the slow suite)."""
    folder = tmp_path_factory.mktemp("plugin_run")
    (folder / "my_game.py").write_text(readme_block("my_game.py"))
    lines = readme_block("commands").splitlines()
    wanted = [lines[0], next(ln for ln in lines if ln.endswith("output_dir=runs/sum")),
              next(ln for ln in lines if ln.startswith("magrpo-export runs/sum "))]
    assert wanted[0].startswith("export PYTHONPATH=")
    # The export line through the shell (what it sets), each command as its console script (tests.preloaded).
    shell = subprocess.run(["bash", "-e", "-c", f'{wanted[0]}\nprintf %s "$PYTHONPATH"'], cwd=folder,
                           env=_env(folder), capture_output=True, text=True, timeout=60, check=True)
    env = {**_env(folder), "PYTHONPATH": shell.stdout}
    for line in wanted[1:]:
        name, *args = shlex.split(line)
        done = preloaded.script(name, args, cwd=folder, env=env, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    return folder


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


@pytest.mark.slow      # nine fresh interpreters (~90 s); the plugin take-up they show is tests/test_trust.py's
def test_the_readme_commands_train_evaluate_resume_export_crossplay_and_tabulate(outside):
    # no take-up command repeats plugins=
    for line in readme_block("commands").splitlines():
        if line.startswith(("magrpo-eval", "magrpo-export", "magrpo-crossplay", "magrpo-table")) or "resume=" in line:
            assert "plugins" not in line, line
    run = outside / "runs" / "sum"
    summary = _json(run / "summary.json")
    assert summary["status"] == "finished" and summary["steps"] == 3          # resumed from 2 to 3
    assert summary["config"]["task"] == "sum_game" and summary["config"]["algo"] == "clipped_magrpo"
    stored = _json(run / "checkpoints" / "step_3" / "config.json")
    assert stored["plugins"] == ["my_game"]
    assert stored["algo"]["advantage"] == "median" and stored["algo"]["advantage_clip"] == 0.5
    evaluated = _json(outside / "evals" / "sum" / "eval.json")
    assert evaluated["task"] == "sum_game" and 0.0 <= evaluated["results"]["team"]["reward_mean"] <= 1.0
    team = _json(outside / "exports" / "sum-team" / "team.json")
    assert team["plugins"] == ["my_game"] and team["task"] == "sum_game" and team["algorithm"] == "clipped_magrpo"
    cross = _json(outside / "crossplay" / "crossplay.json")
    assert cross["task"] == "sum_game" and len(cross["sources"]) == 2
    short = [json.loads(x) for x in (outside / "runs" / "short" / "metrics.jsonl").read_text().splitlines()]
    assert any("train/reward/short_answers" in row or "eval/reward/short_answers" in row for row in short)
    assert _json(outside / "runs" / "short" / "summary.json")["final_eval"]["normalized_return"] is not None
    assert any(p.suffix == ".md" for p in (outside / "tables").iterdir())
    assert "sum_game" in "".join(p.read_text() for p in (outside / "tables").glob("*.md"))


@pytest.mark.slow
def test_the_readme_python_block_trains_and_loads_the_team(outside):
    summary = _json(outside / "runs" / "py" / "summary.json")
    assert summary["status"] == "finished" and summary["steps"] == 2
    assert summary["config"]["task"] == "sum_game"
    assert (outside / "example.out").read_text().strip() != ""


def test_the_example_task_learns_nothing_it_should_not_and_its_reward_is_hand_computed(tmp_path, monkeypatch):
    (tmp_path / "my_game.py").write_text(readme_block("my_game.py"))
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_game

    from magrpo.tasks.check import check_task

    task = my_game.SumGame(my_game.SumGameConfig(), {})
    # digits 3 and 4 for a target of 7: 1.0; 3 and 5 for 7: 1 - 1/7; one digit: 0
    scores = task.reward([["", ""]] * 3, [["3", "4"], ["3", "5"], ["3", "none"]], target=[7, 7, 7])
    assert list(scores) == pytest.approx([1.0, 1 - 1 / 7, 0.0])
    shifted = my_game.SumGame(my_game.SumGameConfig(), {"shift": 1.0, "scale": 2.0})
    scores = shifted.reward([["", ""]] * 3, [["3", "4"], ["3", "5"], ["3", "none"]], target=[7, 7, 7])
    assert list(scores) == pytest.approx([3.0, 3 - 2 / 7, 1.0])
    assert shifted.normalized_return(scores[1], 2) == pytest.approx(1 - 1 / 7)
    assert check_task(my_game.SumGame).ok
    import torch

    returns = torch.tensor([[1.0, 2.0, 4.0]])
    assert my_game.median_baseline(returns).tolist() == [[-1.0, 0.0, 2.0]]


# -- the mechanism --------------------------------------------------------------------------------


def _plugin(folder: Path, name: str, body: str) -> str:
    (folder / f"{name}.py").write_text(body)
    return name


def test_a_name_registered_twice_names_both_places(tmp_path, monkeypatch):
    from magrpo.algos.advantages import ADVANTAGES
    from magrpo.core.registry import RegistryError

    monkeypatch.syspath_prepend(str(tmp_path))
    _plugin(tmp_path, "dup_a", "from magrpo import register_advantage\n"
                               "@register_advantage('dup_name')\ndef first(R):\n    return R\n")
    _plugin(tmp_path, "dup_b", "from magrpo import register_advantage\n"
                               "@register_advantage('dup_name')\ndef second(R):\n    return R\n")
    import dup_a  # noqa: F401

    try:
        with pytest.raises(RegistryError) as info:
            import dup_b  # noqa: F401
        msg = str(info.value)
        assert "algo.advantage='dup_name' is registered twice" in msg
        assert "dup_a.first" in msg and "dup_b.second" in msg and "\n" not in msg
    finally:
        ADVANTAGES.unregister("dup_name")


def test_a_registry_lists_its_builtins_in_their_order_whichever_was_imported_first():
    # the order of `task=` choices and of the reference tables does not depend on which family some
    # other import happened to load first (here: the coding tasks, before the registry's first lookup)
    code = ("import json, sys\n{first}from magrpo.tasks import TASKS\nfrom magrpo.rollout.feedback import FEEDBACKS\n"
            "print(json.dumps([list(TASKS), list(FEEDBACKS)]))")
    orders = []
    for first in ("", "import magrpo.tasks.coding, magrpo.rollout.feedback.expert\n"):
        done = subprocess.run([sys.executable, "-c", code.format(first=first)], capture_output=True, text=True,
                              cwd=ROOT, env={**os.environ, "MAGRPO_PLUGINS": ""}, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        orders.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert orders[0] == orders[1]
    tasks, feedbacks = orders[0]
    assert tasks.index("length_ratio") < tasks.index("tldr") < tasks.index("humaneval") < tasks.index("agree")
    assert feedbacks[:2] == ["none", "plain"] and feedbacks.index("diagnostics") < feedbacks.index("expert")


def test_a_lookup_imports_no_plugin_and_the_commands_do(tmp_path):
    # MAGRPO_PLUGINS names a plugin; looking a name up in a registry imports only the package's own
    # modules, while a command (here magrpo-check-task) imports the plugin and finds its task
    (tmp_path / "lookup_game.py").write_text(
        "from magrpo import Task, register_task\n"
        "@register_task('lookup_game')\nclass LookupGame(Task):\n    pass\n")
    env = {**os.environ, "MAGRPO_PLUGINS": "lookup_game", "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    code = ("import sys\nfrom magrpo.tasks import TASKS\nfrom magrpo.algos import ALGOS\n"
            "print('lookup_game' in TASKS, 'magrpo' in ALGOS, 'lookup_game' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True", "False"]
    done = subprocess.run([sys.executable, "-m", "magrpo.cli.check_task", "lookup_game", "--num-items", "2"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert "not a known task" not in done.stderr and "lookup_game" in done.stdout + done.stderr, done.stderr


def test_an_unknown_evaluation_scheme_lists_the_known_ones():
    from magrpo.core.registry import RegistryError
    from magrpo.rollout.record import SCHEMES

    with pytest.raises(RegistryError, match=r"methods='taem' is not a known evaluation scheme; choose one of: "
                                            r".*single.*team.*did you mean 'team'"):
        SCHEMES["taem"]


def test_an_unknown_name_lists_the_known_ones():
    from magrpo.algos.advantages import ADVANTAGES
    from magrpo.core.registry import RegistryError

    with pytest.raises(RegistryError, match=r"algo.advantage='meen' is not a known advantage estimator; "
                                            r"choose one of: .*mean.*did you mean 'mean'"):
        ADVANTAGES["meen"]
    assert isinstance(RegistryError("x"), ConfigError)


def _cli(args: list[str], cwd: Path, env: dict | None = None, module: str = "magrpo.cli.train") -> tuple[int, str]:
    done = preloaded.run(module, args, cwd=cwd, env={**_env(cwd), "PYTHONPATH": str(cwd), **(env or {})})
    lines = [x for x in done.stderr.splitlines() if x.strip() and not x.startswith("[") and "arning" not in x]
    return done.returncode, "\n".join(lines)


def test_a_plugin_that_cannot_be_imported_is_one_line(tmp_path):
    code, err = _cli(["plugins=[no_such_plugin_mod]", "debug=smoke", f"hydra.run.dir={tmp_path / 'r'}"], tmp_path)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "'no_such_plugin_mod'" in err and "is not installed here" in err


def test_env_and_entry_point_plugins_are_imported(tmp_path):
    _plugin(tmp_path, "env_plug", "from magrpo import register_advantage\n"
                                  "@register_advantage('env_adv')\ndef f(R):\n    return R - R.mean(-1, keepdim=True)\n")
    _plugin(tmp_path, "ep_plug", "from magrpo import register_advantage\n"
                                 "@register_advantage('ep_adv')\ndef f(R):\n    return R - R.mean(-1, keepdim=True)\n")
    dist = tmp_path / "ep_plug-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-plug\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[magrpo.plugins]\nep_plug = ep_plug\n")
    for adv, env in (("env_adv", {"MAGRPO_PLUGINS": "env_plug"}), ("ep_adv", {})):
        out = tmp_path / adv
        code, err = _cli([f"algo.advantage={adv}", "debug=smoke", f"output_dir={out}", f"hydra.run.dir={out}"],
                         tmp_path, env)
        assert code == 0, err
        assert _json(out / "summary.json")["status"] == "finished"


def test_a_plugin_algorithms_schema_is_checked_like_a_builtin(tmp_path):
    (tmp_path / "my_game.py").write_text(readme_block("my_game.py"))
    code, err = _cli(["plugins=[my_game]", "task=sum_game", "algo=clipped_magrpo", "algo.advantage_clip=-1",
                      "debug=smoke", f"hydra.run.dir={tmp_path / 'r'}"], tmp_path)
    assert code == 2 and "algo.advantage_clip=-1" in err and "> 0" in err, err
    code, err = _cli(["plugins=[my_game]", "task=sum_game", "algo=clipped_magrpo", "algo.advantage_clipp=1",
                      "debug=smoke", f"hydra.run.dir={tmp_path / 'r2'}"], tmp_path)
    assert code == 2 and "advantage_clipp" in err and "did you mean 'advantage_clip'" in err, err


def test_a_plugins_keys_get_their_reference_description_from_their_help(tmp_path):
    # The Extending page's command: the reference tables with the example's task and algorithm listed,
    # each key described by its option(..., help=...); the package's own docs/reference is left alone.
    (tmp_path / "my_game.py").write_text(readme_block("my_game.py"))
    script = [sys.executable, str(ROOT / "scripts" / "docs_tables.py"), "--plugins", "my_game"]
    env = {**_env(tmp_path), "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([*script, "--out", "my_reference"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    tasks = (tmp_path / "my_reference" / "tasks.md").read_text()
    algos = (tmp_path / "my_reference" / "algorithms.md").read_text()
    sum_game = tasks.split("## `task=sum_game`", 1)[1].split("\n## ", 1)[0]
    assert "| `task.num_train` | `32` |  | training items |" in sum_game
    assert "| `task.seed` | `0` |  | seed of the item generator |" in sum_game
    assert "| `algo.advantage_clip` | `1.0` | > 0 | c: every advantage is clipped to [-c, c] |" in algos
    refused = subprocess.run(script, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "give --out DIR" in refused.stderr


def test_a_run_whose_plugin_is_gone_is_one_line_naming_module_and_run(plugin_run, tmp_path):
    """The run's folder without my_game.py on the path: every take-up says which plugin is missing."""
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    run = plugin_run / "runs" / "sum"
    code, err = _cli([f"checkpoint={run}", f"hydra.run.dir={tmp_path / 'ev'}"], empty, module="magrpo.cli.evaluate")
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "'my_game'" in err and str(run) in err


def test_a_team_cannot_bring_its_plugin_along(plugin_run, tmp_path, monkeypatch):
    """A team that records a plugin whose module sits inside the team is refused, even when the team
    directory is on the path: a team names what you installed, it never brings code."""
    import shutil

    from magrpo.team.team import Team

    team = Path(shutil.copytree(plugin_run / "exports" / "sum-team", tmp_path / "team"))
    marker = tmp_path / "RAN"
    (team / "team_code.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    info = _json(team / "team.json")
    info["plugins"] = ["team_code", "my_game"]
    (team / "team.json").write_text(json.dumps(info))
    rehash(team)                     # the manifest rewritten to match, as a sender would
    monkeypatch.syspath_prepend(str(team))
    monkeypatch.syspath_prepend(str(plugin_run))
    with pytest.raises(ConfigError, match="not trusted: .*plugin 'team_code'|on sys.path"):    # an edit your signature lacks
        Team.from_pretrained(team, device="cpu")
    with pytest.raises(ConfigError, match="would be imported from inside|on sys.path"):                   # trusted, still never from inside
        Team.from_pretrained(team, device="cpu", trust_plugins=True)
    assert not marker.exists()


def test_a_plugins_own_yaml_composes_with_its_algorithms_schema(tmp_path):
    """A plugin's conf directory (MAGRPO_CONF_DIR) joins the search path, and its YAML may start from
    the schema its algorithm registers, which the issue's `defaults: [/schema/algo@_here_: NAME]` needs."""
    conf = tmp_path / "yaml_plugin_conf"
    (conf / "algo").mkdir(parents=True)
    (conf / "algo" / "yaml_algo.yaml").write_text("defaults:\n  - /schema/algo@_here_: yaml_algo\n  - _self_\n"
                                                  "num_generations: 3\n")
    _plugin(tmp_path, "yaml_plugin", f"""from dataclasses import dataclass
from magrpo import register_algo
from magrpo.algos.magrpo import MAGRPO, MAGRPOConfig
MAGRPO_CONF_DIR = {str(conf)!r}

@dataclass
class YamlAlgoConfig(MAGRPOConfig):
    name: str = "yaml_algo"
    extra_knob: int = 7

@register_algo("yaml_algo")
class YamlAlgo(MAGRPO):
    config_schema = YamlAlgoConfig
""")
    out = tmp_path / "run"
    code, err = _cli(["plugins=[yaml_plugin]", "algo=yaml_algo", "debug=smoke", f"output_dir={out}",
                      f"hydra.run.dir={out}"], tmp_path)
    assert code == 0, err
    stored = _json(out / "checkpoints" / "step_2" / "config.json")["algo"]
    assert stored["name"] == "yaml_algo" and stored["num_generations"] == 3 and stored["extra_knob"] == 7


def test_the_plain_commands_take_plugins_too(plugin_run, tmp_path, capsys):
    from magrpo.cli import export

    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        export.main(["--plugins", "no_such_plugin_mod", str(plugin_run / "runs" / "sum"), str(tmp_path / "t")])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2
    assert len(err) == 1 and "'no_such_plugin_mod' (--plugins) is not installed here" in err[0], err
    assert not (tmp_path / "t").exists()


def test_a_run_remembers_its_extra_config_directory(tmp_path):
    """hydra.searchpath given to the training run is composed with again by magrpo-eval checkpoint=."""
    conf = tmp_path / "my_conf"
    (conf / "experiment").mkdir(parents=True)
    (conf / "experiment" / "my_exp.yaml").write_text("# @package _global_\nalgo:\n  num_generations: 3\n")
    run = tmp_path / "run"
    code, err = _cli([f"hydra.searchpath=[file://{conf}]", "experiment=my_exp", "debug=smoke", f"output_dir={run}",
                      f"hydra.run.dir={run}"], tmp_path)
    assert code == 0, err
    assert _json(run / "checkpoints" / "step_2" / "config.json")["algo"]["num_generations"] == 3
    code, err = _cli([f"checkpoint={run}", "eval.num_items=2", f"hydra.run.dir={tmp_path / 'ev'}"], tmp_path,
                     module="magrpo.cli.evaluate")
    assert code == 0, err
    assert _json(tmp_path / "ev" / "eval.json")["config"]["algo"]["num_generations"] == 3


def test_a_teams_config_cannot_bring_its_plugin_along_either(plugin_run, tmp_path, monkeypatch):
    import shutil

    from magrpo.team.team import Team

    team = Path(shutil.copytree(plugin_run / "exports" / "sum-team", tmp_path / "team"))
    marker = tmp_path / "RAN"
    (team / "cfg_code.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    info = _json(team / "team.json")
    info["config"]["plugins"] = ["cfg_code"]
    (team / "team.json").write_text(json.dumps(info))
    rehash(team)
    monkeypatch.syspath_prepend(str(team))
    monkeypatch.syspath_prepend(str(plugin_run))
    with pytest.raises(ConfigError, match="not trusted: .*plugin 'cfg_code'|on sys.path"):
        Team.from_pretrained(team, device="cpu")
    with pytest.raises(ConfigError, match="would be imported from inside|on sys.path"):
        Team.from_pretrained(team, device="cpu", trust_plugins=True)
    assert not marker.exists()


def test_a_runs_saved_plugins_line_cannot_bring_code_from_the_run(plugin_run, tmp_path):
    """`python -m` puts the working directory on the path: run from inside a run whose saved overrides
    name a module lying in that run, the take-up refuses it."""
    import shutil

    run = Path(shutil.copytree(plugin_run / "runs" / "sum", tmp_path / "run"))
    marker = tmp_path / "RAN"
    (run / "run_code.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    saved = run / ".hydra" / "overrides.yaml"
    saved.write_text(saved.read_text().replace("plugins=[my_game]", "plugins=[my_game,run_code]"))
    env = {"PYTHONPATH": str(plugin_run)}
    code, err = _cli([f"checkpoint={run}", f"hydra.run.dir={tmp_path / 'ev'}"], run, env, module="magrpo.cli.evaluate")
    # an edit your signature lacks (or, run from inside the run, its folder on sys.path)
    assert code == 2 and ("not trusted" in err and "plugin 'run_code'" in err or "on sys.path" in err), err
    code, err = _cli([f"checkpoint={run}", f"hydra.run.dir={tmp_path / 'ev'}", "trust_plugins=true"], run, env,
                     module="magrpo.cli.evaluate")
    assert code == 2 and ("would be imported from inside" in err or "on sys.path" in err), err   # trusted, still not
    assert not marker.exists()


def test_import_magrpo_and_its_public_names_change_nothing_in_the_environment():
    # A library import has no side effects: the process defaults (OMP_WAIT_POLICY) are set by
    # the command modules, before torch loads, not by `import magrpo` or its public API.
    import subprocess
    import sys

    code = ("import os, sys; os.environ.pop('OMP_WAIT_POLICY', None); before = dict(os.environ); "
            "import magrpo; from magrpo import Experiment, Team, Task, register_task, register_algo; "
            "assert dict(os.environ) == before, set(os.environ.items()) ^ set(before.items()); "
            "import magrpo.cli.train; assert os.environ['OMP_WAIT_POLICY'] == 'PASSIVE'; print('ok')")
    env = {k: v for k, v in __import__("os").environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_what_an_algorithm_plugin_needs_comes_from_the_top_of_the_package():
    import magrpo
    from magrpo import (
        AlgoConfig,
        Episode,
        GroupRelativeAlgorithm,
        GroupRelativeConfig,
        TeamAlgorithm,
        at_least,
    )
    from magrpo.algos.c3 import C3
    from magrpo.algos.magrpo import MAGRPO

    assert issubclass(GroupRelativeAlgorithm, TeamAlgorithm) and issubclass(GroupRelativeConfig, AlgoConfig)
    assert issubclass(MAGRPO, GroupRelativeAlgorithm) and issubclass(C3, GroupRelativeAlgorithm)
    assert Episode.__module__ == "magrpo.algos.scaffold" and callable(at_least)
    assert {"TeamAlgorithm", "Episode", "GroupRelativeAlgorithm", "within", "positive"} <= set(magrpo.__all__)
