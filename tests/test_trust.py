"""The trust rule (magrpo.core.trust, docs/security.md), tried as a hostile sender would: a run and a team are
made by one user (a temporary home with its own secret), edited as a sender edits them, and opened by
another (a second home, another secret). Every payload is a module that writes a marker when it is
imported; each case asserts no marker, one line and the exit code. The positive controls (your own
run and team, one you trust, a plugin on your own command line) still take up their plugins."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from magrpo.cli.trust import main as trust_main
from magrpo.core import trust
from magrpo.core.schema import ConfigError
from tests import preloaded
from tests.test_artifact_safety import rehash

PAYLOAD = "open(__import__('os').environ['TRUST_MARKER'], 'a').write(__name__ + '\\n')\n"

GAME = """from magrpo import register_advantage


@register_advantage("trust_median")
def trust_median(returns):
    return returns - returns.median(-1, keepdim=True).values


def score(prompts, completions, **columns):
    return [float(len(parts[0]) < len(parts[1])) for parts in completions]
"""


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def _env(home: Path, lib: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "MAGRPO_HOME": str(home), "PYTHONPATH": str(lib), "MAGRPO_PLUGINS": "",
            "PYTHONWARNINGS": "ignore", **extra}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """The sender's home: a run trained with a plugin and a reward function, and its exported team."""
    root = tmp_path_factory.mktemp("trust")
    lib = root / "lib"
    lib.mkdir()
    (lib / "trust_game.py").write_text(GAME)
    (lib / "payload_mod.py").write_text(PAYLOAD)
    (lib / "payload_pkg").mkdir()
    (lib / "payload_pkg" / "__init__.py").write_text("")
    (lib / "payload_pkg" / "__main__.py").write_text(PAYLOAD)
    home_a, home_b = root / "home_a", root / "home_b"
    env = _env(home_a, lib)
    run, team = root / "made" / "run", root / "made" / "team"
    train = preloaded.script("magrpo-train", ["plugins=[trust_game]", "algo.advantage=trust_median",
                                              "reward.fn=trust_game:score", "reward.max=1", "debug=smoke",
                                              f"output_dir={run}"], cwd=root, env=env, timeout=600)
    assert train.returncode == 0, train.stderr[-3000:]
    export = preloaded.script("magrpo-export", [str(run), str(team)], cwd=root, env=env, timeout=600)
    assert export.returncode == 0, export.stderr[-3000:]
    return {"root": root, "lib": lib, "home_a": home_a, "home_b": home_b, "run": run, "team": team}


@pytest.fixture
def receiver(made, tmp_path, monkeypatch):
    """This process as the other user: their home, the installed modules on the path, a marker to watch."""
    monkeypatch.setenv("MAGRPO_HOME", str(made["home_b"]))
    monkeypatch.setenv("TRUST_MARKER", str(tmp_path / "RAN"))
    monkeypatch.syspath_prepend(str(made["lib"]))
    for name in [m for m in sys.modules if m.startswith(("payload_", "trust_game", "team_", "run_", "beside_"))]:
        monkeypatch.delitem(sys.modules, name)
    return tmp_path


def received(made, tmp_path: Path, what: str) -> Path:
    """A copy of the sender's run or team, as a download gives it."""
    return Path(shutil.copytree(made[what], tmp_path / "downloads" / what, symlinks=True))


def ran(tmp_path: Path) -> bool:
    return (tmp_path / "RAN").exists()


def _cli(entry: str, argv: list[str], capsys) -> tuple[int, list[str]]:
    """A Hydra entry point run here on `argv`: its exit code and stderr lines (a refusal ends before Hydra)."""
    from magrpo.launch import cli_main

    if entry == "eval":
        from magrpo.cli.evaluate import eval_job as job
    else:
        from magrpo.cli.train import train_job as job
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        cli_main(job, f"magrpo-{entry}", entry, argv)
    return e.value.code, [x for x in capsys.readouterr().err.splitlines() if not x.startswith("[magrpo]")]


def _plain(main, argv: list[str], capsys) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = main(argv)
    return code, [x for x in capsys.readouterr().err.splitlines() if not x.startswith("[magrpo")]


def _edit_json(f: Path, change) -> None:
    f.write_text(json.dumps(change(json.loads(f.read_text()))))


# -- the positive controls ------------------------------------------------------------------------------


def test_your_own_run_and_team_take_up_their_plugins(made, monkeypatch):
    from magrpo.core import plugins
    from magrpo.team.team import Team

    monkeypatch.setenv("MAGRPO_HOME", str(made["home_a"]))
    monkeypatch.syspath_prepend(str(made["lib"]))
    assert json.loads((made["run"] / "signature.json").read_text())["code"] == ["module:trust_game"]
    team = Team.from_pretrained(made["team"], device="cpu")
    assert "trust_game" in plugins.loaded() and team.config.reward.fn == "trust_game:score"
    run_team = Team.from_run(made["run"], device="cpu")
    assert run_team.allowed["module:trust_game"] == team.allowed["module:trust_game"] == trust.SIGNED


def test_a_received_team_is_refused_in_one_line_and_trusting_it_takes_it_up(made, receiver, capsys):
    from magrpo.core import plugins
    from magrpo.team.team import Team

    team = received(made, receiver, "team")
    with pytest.raises(trust.UntrustedError) as e:
        Team.from_pretrained(team, device="cpu")
    line = str(e.value)
    assert "\n" not in line and "plugin 'trust_game'" in line and "reward function 'trust_game:score'" in line
    assert "its signature is not yours" in line and f"magrpo-trust {team}" in line and "trust_plugins" in line
    assert "trust_game" not in plugins.loaded()
    Team.from_pretrained(team, device="cpu", trust_plugins=True)            # the one-call trust
    assert "trust_game" in plugins.loaded()


def test_magrpo_trust_covers_what_the_directory_records_now(made, receiver, capsys, tmp_path):
    from magrpo.team.team import Team

    team = received(made, receiver, "team")
    assert trust_main([str(team)]) == 0
    assert "trusted" in capsys.readouterr().out
    Team.from_pretrained(team, device="cpu")
    trust._allowed.clear()
    _edit_json(team / "team.json", lambda t: {**t, "plugins": [*t["plugins"], "payload_mod"]})   # a later edit
    rehash(team)
    with pytest.raises(trust.UntrustedError, match="plugin 'payload_mod'"):
        Team.from_pretrained(team, device="cpu")
    assert not ran(receiver)
    assert trust_main(["--revoke", str(team)]) == 0


def test_a_plugin_you_name_yourself_is_yours(made, receiver):
    from magrpo.launch import load_cli_plugins

    run = received(made, receiver, "run")
    with pytest.raises(trust.UntrustedError):
        load_cli_plugins("eval", [f"checkpoint={run}"])
    trust._allowed.clear()
    load_cli_plugins("eval", [f"checkpoint={run}", "plugins=[trust_game]"])     # named on your command line


# -- config code from a run's files -----------------------------------------------------------------------------


def _evil_conf(tmp_path: Path) -> Path:
    """A config directory whose experiment declares a Hydra callback that imports the payload, and
    switches trust_remote_code on."""
    conf = tmp_path / "evil_conf" / "experiment"
    conf.mkdir(parents=True)
    (conf / "evil.yaml").write_text("# @package _global_\nhydra:\n  callbacks:\n    evil:\n      _target_: "
                                    "payload_mod.Callback\nagents:\n  models:\n    - name_or_path: builtin:tiny\n"
                                    "      trust_remote_code: true\n")
    return conf.parent


def _with_searchpath(run: Path, conf: Path) -> None:
    hydra = run / ".hydra" / "hydra.yaml"
    hydra.write_text(hydra.read_text().replace("searchpath: []", f"searchpath:\n  - file://{conf}"))
    saved = run / ".hydra" / "overrides.yaml"
    saved.write_text(saved.read_text() + "- +experiment=evil\n")


@pytest.mark.parametrize("entry,key", [("eval", "checkpoint"), ("train", "resume")])
def test_a_recorded_search_path_is_never_composed_untrusted(made, receiver, capsys, entry, key):
    run = received(made, receiver, "run")
    _with_searchpath(run, _evil_conf(receiver))
    code, err = _cli(entry, [f"{key}={run}", f"hydra.run.dir={receiver / 'out'}"], capsys)
    assert code == 2 and len(err) == 1 and "config directory 'file://" in err[0] and "refused:" in err[0], err
    assert not ran(receiver) and not (receiver / "out").exists()


def test_your_own_run_with_an_added_search_path_is_refused_too(made, monkeypatch, tmp_path, capsys):
    """The sender's own home: an edit adds what the run's signature does not cover."""
    monkeypatch.setenv("MAGRPO_HOME", str(made["home_a"]))
    monkeypatch.setenv("TRUST_MARKER", str(tmp_path / "RAN"))
    monkeypatch.syspath_prepend(str(made["lib"]))
    run = received(made, tmp_path, "run")
    _with_searchpath(run, _evil_conf(tmp_path))
    code, err = _cli("eval", [f"checkpoint={run}", f"hydra.run.dir={tmp_path / 'out'}"], capsys)
    assert code == 2 and len(err) == 1 and "config directory 'file://" in err[0] and (
        "changed since you made it" in err[0] or "signed at another place" in err[0]), err
    assert not ran(tmp_path)


def test_a_saved_override_placing_config_under_hydra_is_refused(made, monkeypatch, tmp_path, capsys):
    """`group@hydra.callbacks.x=option` would make a project config a Hydra callback: refused, even in your own run."""
    monkeypatch.setenv("MAGRPO_HOME", str(made["home_a"]))
    monkeypatch.syspath_prepend(str(made["lib"]))
    run = received(made, tmp_path, "run")
    saved = run / ".hydra" / "overrides.yaml"
    saved.write_text(saved.read_text() + "- task@hydra.callbacks.x=length_ratio\n")
    code, err = _cli("eval", [f"checkpoint={run}", "trust_plugins=true", f"hydra.run.dir={tmp_path / 'out'}"], capsys)
    assert code == 2 and len(err) == 1 and "places config under hydra" in err[0], err
    assert not (tmp_path / "out").exists()


def test_a_teams_added_hydra_record_is_not_read(made, monkeypatch, tmp_path, capsys):
    """team=DIR composes with no directory of the team's: an added .hydra/hydra.yaml is never read."""
    monkeypatch.setenv("MAGRPO_HOME", str(made["home_a"]))
    monkeypatch.setenv("TRUST_MARKER", str(tmp_path / "RAN"))
    monkeypatch.syspath_prepend(str(made["lib"]))
    team = received(made, tmp_path, "team")
    (team / ".hydra").mkdir()
    (team / ".hydra" / "hydra.yaml").write_text(f"hydra:\n  searchpath:\n  - file://{_evil_conf(tmp_path)}\n")
    (team / "overrides.yaml").write_text((team / "overrides.yaml").read_text() + "- +experiment=evil\n")
    rehash(team)
    code, err = _cli("eval", [f"team={team}", "trust_plugins=true", f"hydra.run.dir={tmp_path / 'out'}"], capsys)
    assert code == 2 and len(err) == 1 and "experiment" in err[0], err
    assert not ran(tmp_path)


def test_a_pkg_search_path_inside_the_run_is_refused_even_trusted(made, receiver, capsys):
    run = received(made, receiver, "run")
    (run / "run_conf_pkg").mkdir()
    (run / "run_conf_pkg" / "__init__.py").write_text(PAYLOAD)
    hydra = run / ".hydra" / "hydra.yaml"
    hydra.write_text(hydra.read_text().replace("searchpath: []", "searchpath:\n  - pkg://run_conf_pkg"))
    sys.path.insert(0, str(run))
    try:
        code, err = _cli("eval", [f"checkpoint={run}", "trust_plugins=true", f"hydra.run.dir={receiver / 'o'}"], capsys)
    finally:
        sys.path.remove(str(run))
    assert code == 2 and len(err) == 1 and ("from inside" in err[0] or "on sys.path is inside it" in err[0]), err
    assert not ran(receiver)


def test_a_run_resumed_from_a_trusted_one_does_not_inherit_the_trust(made, receiver, capsys):
    run = received(made, receiver, "run")
    mine = receiver / "mine"
    done = preloaded.script("magrpo-train", [f"resume={run}", "trust_plugins=true", "max_steps=3",
                           f"output_dir={mine}"], cwd=receiver,
                            env=_env(made["home_b"], made["lib"], TRUST_MARKER=str(receiver / "RAN")), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((mine / "signature.json").read_text())["code"] == []     # the sender's plugin is not yours
    code, err = _cli("eval", [f"checkpoint={mine}", f"hydra.run.dir={receiver / 'ev'}"], capsys)
    assert code == 2 and len(err) == 1 and "plugin 'trust_game'" in err[0] and "does not cover" in err[0], err


# -- recorded plugins and reward functions, without your say -------------------------------------------------------


def _team_recording(made, tmp_path: Path, **change) -> Path:
    team = received(made, tmp_path, "team")
    info = json.loads((team / "team.json").read_text())
    for key, value in change.items():
        if key == "reward_fn":
            info["config"]["reward"]["fn"] = value
        else:
            info[key] = value
    (team / "team.json").write_text(json.dumps(info))
    rehash(team)
    return team


def test_every_command_refuses_a_received_teams_plugin_in_one_line(made, receiver, capsys):
    from magrpo.cli import crossplay
    from magrpo.team.team import Team

    team = _team_recording(made, receiver, plugins=["trust_game", "payload_mod"])
    with pytest.raises(trust.UntrustedError, match="plugin 'payload_mod'"):
        Team.from_pretrained(team, device="cpu")
    code, err = _cli("eval", [f"team={team}", f"hydra.run.dir={receiver / 'ev'}"], capsys)
    assert code == 2 and len(err) == 1 and "payload_mod" in err[0], err
    code, err = _plain(crossplay.main, [str(team), str(team), "--out", str(receiver / "cp")], capsys)
    assert code == 2 and len(err) == 1 and "payload_mod" in err[0] and "--trust-plugins" in err[0], err
    assert not ran(receiver)


def test_every_command_refuses_a_received_runs_plugin_in_one_line(made, receiver, capsys):
    from magrpo.cli import export
    from magrpo.team.team import Team

    run = received(made, receiver, "run")
    ckpt = run / "checkpoints" / "step_2"
    _edit_json(ckpt / "config.json", lambda c: {**c, "plugins": ["payload_mod"]})
    rehash(ckpt)
    with pytest.raises(trust.UntrustedError, match="plugin 'payload_mod'"):
        Team.from_run(ckpt, device="cpu")
    code, err = _plain(export.main, [str(run), str(receiver / "t")], capsys)
    assert code == 2 and len(err) == 1 and "payload_mod" in err[0], err
    code, err = _cli("train", [f"resume={run}", "max_steps=3", f"hydra.run.dir={receiver / 'r'}"], capsys)
    assert code == 2 and len(err) == 1 and "payload_mod" in err[0], err
    assert not ran(receiver) and not (receiver / "t").exists() and not (receiver / "r").exists()


def test_a_recorded_reward_function_is_neither_imported_nor_called(made, receiver):
    from magrpo.team.team import Team

    team = _team_recording(made, receiver, reward_fn="payload_mod:score")
    with pytest.raises(trust.UntrustedError, match="reward function 'payload_mod:score'"):
        Team.from_pretrained(team, device="cpu")
    assert not ran(receiver) and "payload_mod" not in sys.modules


@pytest.mark.parametrize("name,words", [("antigravity", "standard library"), ("this", "standard library"),
                                        ("payload_pkg.__main__", "__main__ module"),
                                        ("magrpo.table.__main__", "__main__ module"),
                                        ("x" * 1_000_000, "longer than 200 characters")])
def test_what_is_never_a_plugin_even_trusted(made, receiver, name, words):
    from magrpo.team.team import Team

    team = _team_recording(made, receiver, plugins=[name])
    with pytest.raises(ConfigError) as e:
        Team.from_pretrained(team, device="cpu", trust_plugins=True)
    assert words in str(e.value) and len(str(e.value)) < 1000
    assert not ran(receiver)
    if name in ("antigravity", "this", "payload_pkg.__main__", "magrpo.table.__main__"):
        assert name not in sys.modules              # found by name, never imported


def test_a_list_of_ten_thousand_plugins_is_one_line_and_imports_none(made, receiver):
    from magrpo.team.team import Team

    team = _team_recording(made, receiver, plugins=[f"payload_{k}" for k in range(10_000)])
    with pytest.raises(ConfigError) as e:
        Team.from_pretrained(team, device="cpu", trust_plugins=True)
    assert "at most" in str(e.value) and len(str(e.value)) < 1000


# -- the "never from inside the directory" guard, trusted ---------------------------------------------------------


INSIDE = "from inside|on sys.path is inside it|on sys.path holds it"


def _refused_trusted(load, path: Path, receiver: Path, match: str = INSIDE) -> None:
    """Loading `path` with trust_plugins=True (load: Team.from_pretrained or Team.from_run) is a
    ConfigError matching `match`, and no code the receiver got ran."""
    with pytest.raises(ConfigError, match=match):
        load(path, device="cpu", trust_plugins=True)
    assert not ran(receiver)


def test_a_parent_package_inside_the_team_is_never_run(made, receiver, monkeypatch):
    from magrpo.team.team import Team

    team = _team_recording(made, receiver, plugins=["team_pkg.sub"])
    (team / "team_pkg").mkdir()
    (team / "team_pkg" / "__init__.py").write_text(PAYLOAD)
    (team / "team_pkg" / "sub.py").write_text("")
    monkeypatch.syspath_prepend(str(team))
    _refused_trusted(Team.from_pretrained, team, receiver)


def test_the_team_folder_itself_is_no_package(made, receiver, monkeypatch):
    from magrpo.team.team import Team

    team = _team_recording(made, receiver, plugins=["team"])
    (team / "__init__.py").write_text(PAYLOAD)
    monkeypatch.syspath_prepend(str(team.parent))
    _refused_trusted(Team.from_pretrained, team, receiver)


def test_a_symlink_inside_the_team_is_inside(made, receiver, monkeypatch):
    from magrpo.team.team import Team

    elsewhere = receiver / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "team_linked.py").write_text(PAYLOAD)
    team = _team_recording(made, receiver, plugins=["team_linked"])
    (team / "team_linked.py").symlink_to(elsewhere / "team_linked.py")
    monkeypatch.syspath_prepend(str(team))
    _refused_trusted(Team.from_pretrained, team, receiver)


def test_a_checkpoint_path_answers_for_its_whole_run(made, receiver, monkeypatch):
    from magrpo.team.team import Team

    run = received(made, receiver, "run")
    (run / "run_root_mod.py").write_text(PAYLOAD)
    ckpt = run / "checkpoints" / "step_2"
    _edit_json(ckpt / "config.json", lambda c: {**c, "plugins": ["run_root_mod"]})
    rehash(ckpt)
    monkeypatch.syspath_prepend(str(run))
    _refused_trusted(Team.from_run, ckpt, receiver)


def test_a_module_beside_a_received_team_is_refused(made, receiver, monkeypatch):
    """The docs' `export PYTHONPATH=$PWD` in the download folder: a module the download brought beside the team."""
    from magrpo.team.team import Team

    team = _team_recording(made, receiver, plugins=["beside_mod"])
    (team.parent / "beside_mod.py").write_text(PAYLOAD)
    monkeypatch.syspath_prepend(str(team.parent))
    _refused_trusted(Team.from_pretrained, team, receiver, match="from beside|on sys.path holds it")


def test_a_reward_module_inside_the_team_is_refused_as_a_plugin_is(made, receiver, monkeypatch):
    from magrpo.team.team import Team

    team = _team_recording(made, receiver, reward_fn="team_reward:score")
    (team / "team_reward.py").write_text(PAYLOAD + "def score(prompts, completions, **c):\n    return [1.0] * len(completions)\n")
    monkeypatch.syspath_prepend(str(team))
    _refused_trusted(Team.from_pretrained, team, receiver)


def test_a_damaged_team_is_refused_before_its_plugin(made, receiver):
    from magrpo.team.team import Team

    team = _team_recording(made, receiver, plugins=["payload_mod"])
    (team / "README.md").write_text("edited after the manifest\n")
    _refused_trusted(Team.from_pretrained, team, receiver, match="README.md")


# -- a plugin's own failures, one line each -----------------------------------------------------------------------

FAILURES = {
    "sys_exit": ("import sys\nsys.exit(0)\n", 2, "called sys.exit(0) at"),
    "interrupt": ("raise KeyboardInterrupt\n", 130, "interrupted while importing the plugin 'interrupt_plug'"),
    "clash": ("from magrpo import Task, register_task\n\n\n@register_task('agree')\nclass Mine(Task):\n    pass\n",
              2, "task.name='agree' is registered twice"),
    "prefix": ("import prefix\n", 2, "needs the module 'prefix', which is not installed here"),
    "raises": ("x = 1\nraise ValueError('bad setting')\n", 2, "raised ValueError: bad setting at"),
}


@pytest.mark.parametrize("name", list(FAILURES))
def test_a_plugin_failing_on_import_is_one_line_naming_it(tmp_path, monkeypatch, capsys, name):
    body, code, words = FAILURES[name]
    plug = f"{name}_plug"
    (tmp_path / f"{plug}.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    got, err = _cli("train", [f"plugins=[{plug}]", "debug=smoke", f"hydra.run.dir={tmp_path / 'r'}"], capsys)
    assert got == code and len(err) == 1 and f"'{plug}'" in err[0] and words in err[0], err
    if name in ("sys_exit", "raises"):
        assert f"{tmp_path / plug}.py:" in err[0]           # the plugin's own file and line
    assert not (tmp_path / "r").exists()
    from magrpo.tasks import TASKS

    assert TASKS["agree"].__module__.startswith("magrpo.")   # a clash replaces no built-in


def test_a_plugin_calling_os_exit_is_one_line_and_trains_nothing(tmp_path):
    (tmp_path / "exit_plug.py").write_text("import os\nos._exit(0)\n")
    done = preloaded.script("magrpo-train", ["plugins=[exit_plug]", "debug=smoke", f"output_dir={tmp_path / 'r'}"],
                            cwd=tmp_path, env=_env(tmp_path / "home", tmp_path), timeout=300)
    err = [x for x in done.stderr.splitlines() if not x.startswith("[magrpo]")]
    assert done.returncode == 2 and len(err) == 1 and "called os._exit(0)" in err[0], done.stderr
    assert not (tmp_path / "r").exists()


def test_plugins_as_a_string_is_refused_before_it_is_imported(tmp_path, monkeypatch, capsys):
    (tmp_path / "lone_plug.py").write_text("open({!r}, 'w').write('ran')\n".format(str(tmp_path / "RAN")))
    monkeypatch.syspath_prepend(str(tmp_path))
    code, err = _cli("train", ["plugins=lone_plug", "debug=smoke", f"hydra.run.dir={tmp_path / 'r'}"], capsys)
    assert code == 2 and len(err) == 1 and "write plugins=[lone_plug]" in err[0], err
    assert not ran(tmp_path)


def test_a_clash_in_python_is_an_error_and_keeps_the_built_in(tmp_path, monkeypatch):
    (tmp_path / "py_clash.py").write_text(FAILURES["clash"][0])
    monkeypatch.syspath_prepend(str(tmp_path))
    from magrpo.core.registry import RegistryError

    with pytest.raises(RegistryError, match="registered twice"):
        import py_clash  # noqa: F401
    from magrpo.tasks.check import check_task

    assert check_task("agree").ok


def test_a_run_that_a_plugin_ends_says_so_in_its_last_line(tmp_path):
    (tmp_path / "ending_reward.py").write_text("import sys\n\n\ndef score(prompts, completions, **columns):\n"
                                               "    sys.exit(0)\n")
    out = tmp_path / "r"
    done = preloaded.script("magrpo-train", ["reward.fn=ending_reward:score", "reward.max=1", "debug=smoke",
                           f"output_dir={out}"], cwd=tmp_path, env=_env(tmp_path / "home", tmp_path), timeout=300)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and "the run was ended by sys.exit(0), called at ending_reward.py:5" in last, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["reason"] == "the run was ended by sys.exit(0)"


# -- what a red-team pass found, each closed --------------------------------------------------------------


def test_a_planted_record_in_a_checkpoint_folder_or_a_file_path_is_checked_too(made, receiver, capsys):
    """`checkpoint=RUN/checkpoints/step_N` (or a file in it) takes up the records of that folder too."""
    run = received(made, receiver, "run")
    step = run / "checkpoints" / "step_2"
    (step / ".hydra").mkdir()
    (step / ".hydra" / "overrides.yaml").write_text("- plugins=[payload_mod]\n- debug=smoke\n")
    (run / "checkpoints" / "latest").write_text("step_2\n")
    for path in (step, run / "checkpoints" / "latest"):
        code, err = _cli("eval", [f"checkpoint={path}", "plugins=[trust_game]", f"hydra.run.dir={receiver / 'o'}"],
                         capsys)
        assert code == 2 and len(err) == 1 and "plugin 'payload_mod'" in err[0], err
    assert not ran(receiver)


def test_a_reward_function_made_by_an_interpolation_is_refused(made, receiver):
    from magrpo.team.team import Team

    team = _team_recording(made, receiver, reward_fn="${agents.models.0.chat_template_kwargs.x}")
    _refused_trusted(Team.from_pretrained, team, receiver, match="never an interpolation|never resolve")


@pytest.mark.parametrize("line,words", [("experiment=../../../../../../../../tmp/evil", "by a path outside"),
                                        ("+experiment@_global_.hydra.callbacks=x", "places config under hydra")])
def test_a_saved_override_cannot_reach_config_outside_conf(made, receiver, capsys, line, words):
    run = received(made, receiver, "run")
    saved = run / ".hydra" / "overrides.yaml"
    saved.write_text(saved.read_text() + f"- {line}\n")
    code, err = _cli("eval", [f"checkpoint={run}", "trust_plugins=true", f"hydra.run.dir={receiver / 'o'}"], capsys)
    assert code == 2 and len(err) == 1 and words in err[0], err


def test_a_search_path_without_a_scheme_inside_the_run_is_refused_even_trusted(made, receiver, capsys):
    run = received(made, receiver, "run")
    (run / "conf").mkdir()
    hydra = run / ".hydra" / "hydra.yaml"
    hydra.write_text(hydra.read_text().replace("searchpath: []", f"searchpath:\n  - {run / 'conf'}"))
    code, err = _cli("eval", [f"checkpoint={run}", "trust_plugins=true", f"hydra.run.dir={receiver / 'o'}"], capsys)
    assert code == 2 and len(err) == 1 and "lies inside it" in err[0], err


def test_a_signature_copied_into_another_directory_covers_nothing(made, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("MAGRPO_HOME", str(made["home_a"]))
    monkeypatch.syspath_prepend(str(made["lib"]))
    run = received(made, tmp_path, "run")
    saved = run / ".hydra" / "overrides.yaml"
    saved.write_text(saved.read_text() + "- seed=3\n")        # another run's record, the maker's signature copied in
    code, err = _cli("eval", [f"checkpoint={run}", f"hydra.run.dir={tmp_path / 'o'}"], capsys)
    assert code == 2 and len(err) == 1 and "signed at another place" in err[0], err


def test_a_yaml_alias_bomb_is_refused_before_it_grows(made, receiver, capsys):
    import time

    run = received(made, receiver, "run")
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcde", "bcdef"))
    (run / ".hydra" / "config.yaml").write_text(bomb)
    start = time.perf_counter()
    code, err = _cli("eval", [f"checkpoint={run}", f"hydra.run.dir={receiver / 'o'}"], capsys)
    assert code == 2 and len(err) == 1 and "anchors or aliases" in err[0], err
    assert time.perf_counter() - start < 30


def test_trust_remote_code_made_by_an_interpolation_is_refused(made, receiver):
    """A saved override builds the key out of pieces; the composed config says true; the command line did not."""
    team = _team_recording(made, receiver)
    trick = ("agents.models='${oc.decode:\"[{name_or_path: builtin:tiny, trust_remote${oc.env:ZZ_NOPE,}_code: "
             "true}]\"}'")
    import yaml

    lines = yaml.safe_load((team / "overrides.yaml").read_text())
    (team / "overrides.yaml").write_text(yaml.safe_dump([*lines, trick]))
    rehash(team)
    done = preloaded.script("magrpo-eval", [f"team={team}", "trust_plugins=true", "eval.num_items=2",
                           f"hydra.run.dir={receiver / 'o'}"], cwd=receiver,
                            env=_env(made["home_b"], made["lib"], TRUST_MARKER=str(receiver / "RAN")), timeout=300)
    err = [x for x in done.stderr.splitlines() if x.startswith("magrpo-eval:")]
    assert done.returncode == 2 and len(err) == 1 and ("trust_remote_code is true, but not by your command line"
                                                       in err[0] or "never resolve" in err[0]), done.stderr[-2000:]


def test_a_teams_sandbox_level_is_this_machines(made, receiver):
    from magrpo.team.team import Team

    team = received(made, receiver, "team")
    _edit_json(team / "team.json", lambda t: {**t, "config": {**t["config"], "sandbox": {"isolation": "guards"}}})
    rehash(team)
    loaded = Team.from_pretrained(team, device="cpu", trust_plugins=True)
    assert loaded.config.sandbox.isolation == "auto"       # the default here, never the record's "guards"


def test_a_table_never_reads_the_environment_a_record_names(tmp_path, monkeypatch):
    from magrpo.table.runs import read_hydra_config

    monkeypatch.setenv("TRUST_SECRET_TOKEN", "s3cr3t")
    f = tmp_path / "config.yaml"
    f.write_text("algo:\n  temperature: 0.5\neval:\n  temperature: ${algo.temperature}\n"
                 "label: ${oc.env:TRUST_SECRET_TOKEN}\nalias: ${label}\n")
    flat = read_hydra_config(f)
    assert flat["eval.temperature"] == 0.5                          # its own keys still resolve
    assert "s3cr3t" not in json.dumps(flat, default=str)            # the environment never does


def test_a_commands_trust_plugins_ends_with_the_command(made, receiver, capsys):
    # A command run from Python (a notebook, a script) with --trust-plugins trusts for that command
    # only: the Team call after it refuses the received team again, with the Python API's words.
    from magrpo.table import main as table_main
    from magrpo.team.team import Team

    team = received(made, receiver, "team")
    (receiver / "runs").mkdir()
    try:
        table_main(["--trust-plugins", str(receiver / "runs"), "--out", str(receiver / "tables")])
    except SystemExit:
        pass                                # nothing to tabulate: the command ends with an error
    with pytest.raises(trust.UntrustedError) as e:
        Team.from_pretrained(team, device="cpu")
    assert "trust_plugins=True on this command" in str(e.value) and "--trust-plugins" not in str(e.value)
    assert not ran(receiver)
