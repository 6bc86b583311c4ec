"""What a received run or team records acts for no one (magrpo.core.trust, magrpo.core.key_classes, magrpo.core.records;
docs/security.md, "What a received directory can choose").

Every case is built as a receiver gets the directory: the sender makes a run and a team under one
home (its own secret), edits them as a sender edits (records rewritten, manifests rehashed), and the
receiver opens the copy in a download folder under another home. A loopback HTTP sink stands for
the sender's server; a secret sits in the receiver's environment. Each case asserts what the
receiver sees (one line, the exit code), that no request reached the sink, that no payload module
ran, and that the secret is in no file the command wrote. The positive controls (your own run and
team, a key you give yourself) still take up what they record."""

from __future__ import annotations

import http.server
import json
import os
import pickle
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from magrpo.core import key_classes, received, records, signatures, trust
from magrpo.core.schema import ConfigError
from tests import preloaded
from tests.test_artifact_safety import rehash

SECRET = "s3cr3t-0f-the-receiver-91d2"
PAYLOAD = "open(__import__('os').environ['RECEIVED_MARKER'], 'a').write(__name__ + '\\n')\n"


# -- the sender's server, the sender's directories ---------------------------------------------------------


class Sink:
    """A loopback chat-completions endpoint that records every request (headers and body)."""

    def __init__(self) -> None:
        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
                seen.append({"headers": dict(self.headers), "body": body})
                out = json.dumps({"choices": [{"message": {"content": "looks fine"}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def sender(tmp_path_factory):
    """The sender's home: a smoke run and its exported team, no plugins (data only)."""
    root = tmp_path_factory.mktemp("received")
    home = root / "home_sender"
    env = {**os.environ, "MAGRPO_HOME": str(home), "MAGRPO_PLUGINS": "", "PYTHONWARNINGS": "ignore"}
    run, team = root / "made" / "run", root / "made" / "team"
    done = preloaded.script("magrpo-train", ["debug=smoke", f"output_dir={run}"], cwd=root, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    done = preloaded.script("magrpo-export", [str(run), str(team)], cwd=root, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return {"root": root, "home": home, "run": run, "team": team}


@pytest.fixture
def sink():
    s = Sink()
    yield s
    s.close()


def receiver_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The receiver's environment: their own home, a secret in a variable, a marker a payload writes."""
    return {**os.environ, "MAGRPO_HOME": str(tmp_path / "home_receiver"), "MAGRPO_PLUGINS": "",
            "PYTHONWARNINGS": "ignore", "RECEIVER_SECRET": SECRET, "RECEIVED_MARKER": str(tmp_path / "RAN"),
            **extra}


def download(sender, tmp_path: Path, what: str) -> Path:
    """A copy of the sender's run or team in the receiver's download folder."""
    return Path(shutil.copytree(sender[what], tmp_path / "downloads" / what, symlinks=True))


def edit_team(team: Path, config: dict | None = None, lines: list[str] | None = None, **fields) -> None:
    """What a sender does to a team: config keys set (dotted), override lines added, team.json fields
    replaced; the manifest rewritten to match."""
    info = json.loads((team / "team.json").read_text())
    for key, value in (config or {}).items():
        node = info["config"]
        *path, leaf = key.split(".")
        for p in path:
            node = node.setdefault(p, {})
        node[leaf] = value
    info.update(fields)
    if "feedback" in (config or {}) or any(k.startswith("feedback.") for k in config or {}):
        info["feedback"] = info["config"]["feedback"]
    if lines is not None:
        info["overrides"] = [*info["overrides"], *lines]
        (team / "overrides.yaml").write_text(yaml.safe_dump(info["overrides"]))
    (team / "team.json").write_text(json.dumps(info))
    rehash(team)


def add_lines(run: Path, lines: list[str]) -> None:
    saved = run / ".hydra" / "overrides.yaml"
    saved.write_text(yaml.safe_dump([*(yaml.safe_load(saved.read_text()) or []), *lines]))


def expert(url: str) -> dict:
    return {"mode": "expert", "url": url, "api_key_env": "RECEIVER_SECRET", "model": "m", "timeout_s": 5.0,
            "retries": 0, "retry_backoff_s": 0.0, "max_workers": 1, "local_model": None, "max_new_tokens": 8,
            "temperature": 0.0}


def command(prog: str, args: list[str], tmp_path: Path, cwd: Path | None = None, **env: str):
    return preloaded.script(prog, args, cwd=cwd or tmp_path, env=receiver_env(tmp_path, **env), timeout=600)


def lines_of(done, prog: str) -> list[str]:
    return [x for x in done.stderr.splitlines() if x.startswith(f"{prog}:")]


def no_secret_written(*folders: Path) -> None:
    for folder in folders:
        for f in Path(folder).rglob("*") if Path(folder).exists() else []:
            if f.is_file():
                assert SECRET.encode() not in f.read_bytes(), f


# -- every key has a class ----------------------------------------------------------------------------------


def schema_keys() -> set[str]:
    """Every key of every registered schema, dotted without list indices (the node a group picks is its keys)."""
    import dataclasses
    import typing

    from magrpo.algos import ALGOS
    from magrpo.config.groups import RewardConfig
    from magrpo.config.schemas import EvalRunSchema
    from magrpo.rollout.feedback import FEEDBACKS
    from magrpo.tasks import TASKS, reward_schema_of
    from magrpo.validation.store import register_schemas

    register_schemas()

    def nested(cls, name):
        hint = typing.get_type_hints(cls)[name]
        for t in (hint, *typing.get_args(hint), *(a for h in typing.get_args(hint) for a in typing.get_args(h))):
            if dataclasses.is_dataclass(t):
                return t
        return None

    def walk(cls, prefix, out):
        for f in dataclasses.fields(cls):
            sub = nested(cls, f.name)
            if sub is not None:
                walk(sub, f"{prefix}{f.name}.", out)
            elif not (prefix == "" and f.name in ("task", "reward", "algo", "feedback")):
                out.add(f"{prefix}{f.name}")
        return out

    def own(registry):      # the package's own (a plugin another test of this worker imported is not)
        return [c for c in registry.values() if c.__module__.startswith("magrpo.")]

    keys = walk(EvalRunSchema, "", set())
    for cls in own(ALGOS):
        walk(cls.config_schema, "algo.", keys)
    for cls in own(FEEDBACKS):
        walk(cls.config_schema, "feedback.", keys)
    for cls in own(TASKS):
        if cls.config_schema is not None:
            walk(cls.config_schema, "task.", keys)
        if reward_schema_of(cls) is not None:
            walk(reward_schema_of(cls), "reward.", keys)
    return walk(RewardConfig, "reward.", keys)


def unclassified(keys: set[str]) -> list[str]:
    return sorted(k for k in keys if key_classes.key_class(k) is None)


def test_every_key_a_record_can_set_has_a_class():
    keys = schema_keys()
    assert len(keys) > 200
    assert unclassified(keys) == []
    assert {key_classes.key_class(k) for k in keys} == {"inert", "code", "reach"}


def test_the_class_check_fails_on_a_key_with_no_class():
    """A key added to a schema without a class is found (and, until classified, never taken from a
    received record: no class is reach)."""
    assert unclassified(schema_keys() | {"task.data.mirror_url"}) == ["task.data.mirror_url"]
    assert key_classes.reaching("task.data.mirror_url", "http://x") == [("task.data.mirror_url", "http://x")]


def test_reach_values_that_choose_nothing_are_taken_like_inert_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert key_classes.reaching("agents.models", [{"name_or_path": "builtin:tiny", "lr": 1}]) == []
    assert key_classes.reaching("agents.models.0.name_or_path", "Qwen/Qwen3-1.7B") == []
    (tmp_path / "Qwen").mkdir()
    (tmp_path / "Qwen" / "Qwen3-1.7B").mkdir()
    assert key_classes.reaching("agents.models.0.name_or_path", "Qwen/Qwen3-1.7B") != []    # a path here
    assert key_classes.reaching("agents.models.0.name_or_path", "/models/x") != []
    assert key_classes.reaching("sandbox", {"isolation": "auto"}) == []
    assert key_classes.reaching("sandbox.isolation", "guards") == [("sandbox.isolation", "guards")]
    assert key_classes.reaching("feedback.url", None) == []
    assert key_classes.reaching("algo.lr", 0.5) == [] and key_classes.reaching("plugins", ["x"]) == []


# -- reach keys: data that would send the receiver's secrets out ------------------------------------------


def test_a_received_team_never_sends_to_its_url_nor_reads_its_key_variable(sender, sink, tmp_path):
    team = download(sender, tmp_path, "team")
    edit_team(team, config={"feedback": expert(sink.url), "algo.num_turns": 2}, turns={
        "num_turns": 2, "discount": 1.0, "early_termination_threshold": None},
        lines=["feedback=expert", f"feedback.url={sink.url}", "feedback.api_key_env=RECEIVER_SECRET",
               "algo.num_turns=2"])
    out = tmp_path / "ev"
    done = command("magrpo-eval", [f"team={team}", "eval.num_items=2", f"hydra.run.dir={out}"], tmp_path,
                   cwd=tmp_path / "downloads")
    assert done.returncode == 0, done.stderr[-3000:]
    skipped = [x for x in done.stderr.splitlines() if "not taken up" in x]
    assert any("feedback.url" in x for x in skipped) and any("feedback.api_key_env" in x for x in skipped), skipped
    assert sink.seen == []                          # nothing reached the sender's server
    assert SECRET not in done.stderr + done.stdout
    no_secret_written(out, tmp_path / "downloads")


def test_your_own_team_takes_its_reach_keys_up(sender, sink, tmp_path, monkeypatch):
    """The positive control: a team you exported, from a team of yours, here: its reach keys are yours."""
    from magrpo.core.instances import instance
    from magrpo.rollout.feedback import FEEDBACKS
    from magrpo.team.team import Team

    monkeypatch.setenv("MAGRPO_HOME", str(sender["home"]))
    loaded = Team.from_pretrained(sender["team"], device="cpu")
    assert loaded.own
    loaded.config.feedback = instance({**expert(sink.url), "api_key_env": "OPENAI_API_KEY"},
                                      FEEDBACKS["expert"].config_schema)
    mine = tmp_path / "mine"
    loaded.save_pretrained(mine)
    assert signatures.made_by_you(mine)
    again = Team.from_pretrained(mine, device="cpu")
    assert again.config.feedback.url == sink.url            # taken: yours
    copy = Path(shutil.copytree(mine, tmp_path / "copy"))
    with pytest.raises(ConfigError, match="feedback.url=None"):   # a copy elsewhere is received
        Team.from_pretrained(copy, device="cpu")


def test_from_python_a_received_teams_reach_keys_are_skipped_and_given_back_by_you(sender, sink, tmp_path,
                                                                                    monkeypatch, caplog):
    from magrpo.team.team import Team

    monkeypatch.setenv("MAGRPO_HOME", str(tmp_path / "home_receiver"))
    monkeypatch.chdir(tmp_path)
    team = download(sender, tmp_path, "team")
    info = json.loads((team / "team.json").read_text())
    models = [{**m, "attn_implementation": "their-org/their-kernel"} for m in info["config"]["agents"]["models"]]
    edit_team(team, config={"feedback": expert(sink.url), "agents.models": models})
    with pytest.raises(ConfigError, match="feedback.url=None"):        # the url is not the team's to give
        Team.from_pretrained(team, device="cpu")
    assert "not taken up: feedback.url" in caplog.text and "not taken up: agents.models.0.attn_implementation" \
        in caplog.text
    loaded = Team.from_pretrained(team, device="cpu", overrides={"feedback.url": "http://127.0.0.1:9/v1"})
    assert loaded.config.feedback.url == "http://127.0.0.1:9/v1"
    assert loaded.config.feedback.api_key_env == "OPENAI_API_KEY"     # the default, not the sender's variable
    assert loaded.config.agents.models[0].attn_implementation is None
    assert sink.seen == []


def test_a_received_runs_data_path_is_not_read_on_resume(sender, tmp_path):
    run = download(sender, tmp_path, "run")
    secret_file = tmp_path / "private.jsonl"
    secret_file.write_text(json.dumps({"prompt": SECRET}) + "\n")
    add_lines(run, [f"+task.data.path={secret_file}"])
    out = tmp_path / "resumed"
    done = command("magrpo-train", [f"resume={run}", "max_steps=3", f"output_dir={out}"], tmp_path)
    assert any("not taken up: task.data.path" in x for x in done.stderr.splitlines()), done.stderr[-2000:]
    no_secret_written(out, run)


def test_an_export_of_a_received_run_carries_none_of_its_reach_lines(sender, tmp_path):
    run = download(sender, tmp_path, "run")
    add_lines(run, ["feedback=expert", "feedback.url=http://127.0.0.1:9/v1"])
    out = tmp_path / "exported"
    done = command("magrpo-export", [str(run), str(out), "--trust-plugins"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    saved = yaml.safe_load((out / "overrides.yaml").read_text())
    assert not any("127.0.0.1" in line for line in saved), saved
    assert "127.0.0.1" not in (out / "team.json").read_text()


# -- a record's interpolations never resolve -----------------------------------------------------------------


@pytest.mark.parametrize("where", ["team overrides", "team config"])
def test_an_interpolation_in_a_received_team_is_refused_in_one_line(sender, tmp_path, where):
    team = download(sender, tmp_path, "team")
    if where == "team overrides":
        edit_team(team, lines=["+task.secret=${oc.env:RECEIVER_SECRET}"])
    else:
        edit_team(team, config={"task.name": "${oc.env:RECEIVER_SECRET}"})
    out = tmp_path / "ev"
    done = command("magrpo-eval", [f"team={team}", f"hydra.run.dir={out}"], tmp_path)
    err = lines_of(done, "magrpo-eval")
    assert done.returncode == 2 and len(err) == 1 and "never resolve" in err[0], done.stderr[-2000:]
    assert SECRET not in done.stderr + done.stdout
    assert not out.exists()


def test_an_interpolation_in_a_received_run_is_refused_on_resume_and_export(sender, tmp_path):
    run = download(sender, tmp_path, "run")
    add_lines(run, ["+task.secret=${oc.env:RECEIVER_SECRET}"])
    done = command("magrpo-train", [f"resume={run}", "max_steps=3", f"output_dir={tmp_path / 'r'}"], tmp_path)
    err = lines_of(done, "magrpo-train")
    assert done.returncode == 2 and len(err) == 1 and "never resolve" in err[0], done.stderr[-2000:]
    done = command("magrpo-export", [str(run), str(tmp_path / "t"), "--trust-plugins"], tmp_path)
    err = lines_of(done, "magrpo-export")
    assert done.returncode == 2 and len(err) == 1 and "never resolve" in err[0], done.stderr[-2000:]
    assert SECRET not in done.stderr + done.stdout and not (tmp_path / "t").exists()


def test_crossplay_refuses_a_team_whose_config_holds_an_interpolation(sender, tmp_path):
    team = download(sender, tmp_path, "team")
    edit_team(team, config={"reward.shift": "${oc.env:RECEIVER_SECRET}"})
    done = command("magrpo-crossplay", [str(team), str(sender["team"]), "--out", str(tmp_path / "x"), "--num-items",
                                        "2", "--trust-plugins"], tmp_path)
    err = lines_of(done, "magrpo-crossplay")
    assert done.returncode == 2 and len(err) == 1 and "never resolve" in err[0], done.stderr[-2000:]
    assert SECRET not in done.stderr + done.stdout
    no_secret_written(tmp_path / "x")


def test_magrpo_table_never_resolves_a_runs_interpolation(sender, tmp_path):
    runs = tmp_path / "downloads" / "runs"
    run = Path(shutil.copytree(sender["run"], runs / "a"))
    config = run / ".hydra" / "config.yaml"
    config.write_text(config.read_text().replace("task:\n", "task:\n  secret: ${oc.env:RECEIVER_SECRET}\n", 1))
    for layout in ("generic", "paper"):
        out = tmp_path / f"table_{layout}"
        done = command("magrpo-table", [str(runs), "--out", str(out), "--layout", layout], tmp_path)
        assert SECRET not in done.stderr + done.stdout, layout
        no_secret_written(out)
    assert records.resolve_own_refs({"a": "${oc.env:X}", "b": "${c}", "c": 1, "d": "${a}"}) == \
        {"a": "${oc.env:X}", "b": 1, "c": 1, "d": "${a}"}


# -- trust covers what the refusal listed, for that call only ------------------------------------------------


@pytest.fixture
def with_plugin(tmp_path, monkeypatch):
    """A plugin module installed for the receiver, and the receiver's home."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "recv_game.py").write_text(PAYLOAD)
    monkeypatch.syspath_prepend(str(lib))
    monkeypatch.setenv("MAGRPO_HOME", str(tmp_path / "home_receiver"))
    monkeypatch.setenv("RECEIVED_MARKER", str(tmp_path / "RAN"))
    monkeypatch.delitem(sys.modules, "recv_game", raising=False)
    return lib


def test_a_calls_trust_plugins_ends_with_the_call(sender, tmp_path, with_plugin, monkeypatch):
    from magrpo.team.team import Team

    monkeypatch.chdir(tmp_path)
    one, two = download(sender, tmp_path, "team"), Path(shutil.copytree(sender["team"], tmp_path / "other" / "team"))
    for team in (one, two):
        edit_team(team, plugins=["recv_game"], config={"plugins": ["recv_game"]})
    Team.from_pretrained(one, device="cpu", trust_plugins=True)
    with pytest.raises(trust.UntrustedError, match="plugin 'recv_game'"):
        Team.from_pretrained(two, device="cpu")        # the earlier call's trust covers it no more
    assert trust._allowed.get("module:recv_game") is None


def test_the_flag_covers_the_directories_the_command_names_not_those_a_record_names(sender, tmp_path, with_plugin):
    """Your run names a partner directory that records a plugin: the refusal names that directory,
    and trust_plugins=true on the command does not reach it; it needs its own say."""
    partner = download(sender, tmp_path, "team")
    edit_team(partner, plugins=["recv_game"], config={"plugins": ["recv_game"]})
    mine = tmp_path / "mine"
    (mine / ".hydra").mkdir(parents=True)
    (mine / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"partners=[{partner}]"]))
    signatures.write_signature(mine, [])
    assert signatures.made_by_you(mine)
    with trust.scope():
        trust.on_this_command(True, "trust_plugins=true", dirs=[mine])
        with pytest.raises(trust.UntrustedError) as e:
            trust.take_up(mine)
    assert str(partner) in str(e.value) and "needs its own say" in str(e.value) and "\n" not in str(e.value)
    with trust.scope():
        trust.on_this_command(True, "trust_plugins=true", dirs=[mine])
        with pytest.raises(trust.UntrustedError):
            trust.take_up(partner)                       # not named by the command line: the flag is silent
        trust.on_this_command(True, "trust_plugins=true", dirs=[partner])
        trust.take_up(partner)                           # named: covered
    assert not trust._allowed.get("module:recv_game")


# -- the folder that holds a received directory is not code --------------------------------------------------


def _download_folder(sender, tmp_path: Path) -> Path:
    """A download folder holding the team, a module it records, a hydra_plugins package and a fake
    distribution declaring a magrpo plugin, each a payload."""
    team = download(sender, tmp_path, "team")
    folder = team.parent
    (folder / "beside_mod.py").write_text(PAYLOAD)
    (folder / "hydra_plugins").mkdir()
    (folder / "hydra_plugins" / "evil_plugin.py").write_text(PAYLOAD)
    dist = folder / "evil_pkg-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: evil_pkg\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[magrpo.plugins]\nevil = beside_mod\n")
    edit_team(team, plugins=["beside_mod"], config={"plugins": ["beside_mod"]})
    return folder


@pytest.mark.parametrize("how", ["PYTHONPATH=.", "python -m from the folder"])
def test_the_folder_holding_a_received_team_is_refused_on_sys_path(sender, tmp_path, how):
    folder = _download_folder(sender, tmp_path)
    out = tmp_path / "ev"
    if how == "PYTHONPATH=.":
        done = command("magrpo-eval", ["team=team", "trust_plugins=true", f"hydra.run.dir={out}"], tmp_path,
                       cwd=folder, PYTHONPATH=".")
    else:
        done = subprocess.run([sys.executable, "-m", "magrpo.cli.evaluate", "team=team", "trust_plugins=true",
                               f"hydra.run.dir={out}"], cwd=folder, env=receiver_env(tmp_path), capture_output=True,
                              text=True, timeout=600)
    err = lines_of(done, "magrpo-eval")
    assert done.returncode == 2 and len(err) == 1 and "on sys.path" in err[0] and "teams/" in err[0], done.stderr[-2000:]
    assert not (tmp_path / "RAN").exists() and not out.exists()


def test_an_entry_point_a_download_declares_is_no_package_you_installed(sender, tmp_path):
    """The download's folder on PYTHONPATH, the team moved into a folder of its own: the fake
    distribution beside it declares nothing for you."""
    folder = _download_folder(sender, tmp_path)
    (folder / "team" / "nested").mkdir()
    done = command("magrpo-crossplay", [str(folder / "team"), str(sender["team"]), "--out", str(tmp_path / "x"),
                                        "--num-items", "2"], tmp_path, PYTHONPATH=str(folder))
    assert done.returncode == 2 and not (tmp_path / "RAN").exists(), done.stderr[-2000:]


def test_a_file_config_directory_beside_a_run_is_refused_even_trusted(sender, tmp_path):
    run = download(sender, tmp_path, "run")
    conf = run.parent / "their_conf" / "experiment"
    conf.mkdir(parents=True)
    (conf / "x.yaml").write_text("# @package _global_\nseed: 3\n")
    hydra = run / ".hydra" / "hydra.yaml"
    hydra.write_text(hydra.read_text().replace("searchpath: []", f"searchpath:\n  - file://{conf.parent}"))
    done = command("magrpo-eval", [f"checkpoint={run}", "trust_plugins=true", f"hydra.run.dir={tmp_path / 'o'}"],
                   tmp_path)
    err = lines_of(done, "magrpo-eval")
    assert done.returncode == 2 and len(err) == 1 and "lies beside it" in err[0], done.stderr[-2000:]


# -- a signature binds the whole directory -------------------------------------------------------------------


def test_a_byte_identical_copy_of_your_own_team_is_not_made_by_you(sender, tmp_path, monkeypatch):
    monkeypatch.setenv("MAGRPO_HOME", str(sender["home"]))
    assert signatures.made_by_you(sender["team"]) and signatures.made_by_you(sender["run"])
    copy = download(sender, tmp_path, "team")
    assert not signatures.made_by_you(copy)
    assert "another place" in signatures.signature(copy).why
    run = download(sender, tmp_path, "run")
    (run / ".hydra" / "overrides.yaml").unlink()        # neither team.json nor saved overrides
    assert not signatures.made_by_you(run)


def test_a_signed_reference_keeps_the_inside_guard(sender, tmp_path, monkeypatch):
    """Your own team, a module planted inside it afterwards under the name it records: refused, though signed."""
    from magrpo.team.team import Team

    monkeypatch.setenv("MAGRPO_HOME", str(sender["home"]))
    monkeypatch.setenv("RECEIVED_MARKER", str(tmp_path / "RAN"))
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "own_game.py").write_text("")
    monkeypatch.syspath_prepend(str(lib))
    team = tmp_path / "own_team"
    loaded = Team.from_pretrained(sender["team"], device="cpu")
    loaded.config.plugins = ["own_game"]
    trust.allow_named(["own_game"])
    loaded.save_pretrained(team)
    assert signatures.signature(team).codes == {"module:own_game"} and signatures.made_by_you(team)
    (lib / "own_game.py").unlink()
    (team / "own_game.py").write_text(PAYLOAD)           # planted inside, and found there
    monkeypatch.syspath_prepend(str(team))
    monkeypatch.delitem(sys.modules, "own_game", raising=False)
    trust._allowed.clear()
    with pytest.raises(ConfigError, match="from inside"):
        Team.from_pretrained(team, device="cpu")
    assert not (tmp_path / "RAN").exists()


# -- no data file names a module -------------------------------------------------------------------------------


def test_a_trainer_state_naming_a_module_imports_nothing(tmp_path):
    """A pickle whose global names a module of this package: refused, and the module is never imported
    (an allow-list of enums, never a lookup by the file's names)."""
    import zipfile

    class Named:
        def __reduce__(self):
            return (getattr, (object, "__name__"))

    raw = pickle.dumps(Named(), protocol=2).replace(b"builtins\ngetattr", b"magrpo.cli.paper\nmain")
    state = tmp_path / "trainer_state.pt"
    with zipfile.ZipFile(state, "w") as z:
        z.writestr("trainer_state/data.pkl", raw)
        z.writestr("trainer_state/version", "3\n")
        z.writestr("trainer_state/byteorder", "little")
    code = ("import sys\nfrom magrpo.core.checkpoint import CheckpointError, load_state\n"
            f"try:\n    load_state({str(tmp_path)!r})\nexcept CheckpointError as e:\n    print('refused', e)\n"
            "print('imported' if 'magrpo.cli.paper' in sys.modules else 'not imported')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "refused" in done.stdout and "not imported" in done.stdout, done.stdout + done.stderr[-2000:]


# -- one bounded reader --------------------------------------------------------------------------------------


def test_a_billion_laughs_config_is_one_line_for_magrpo_table(sender, tmp_path):
    runs = tmp_path / "downloads" / "runs"
    run = Path(shutil.copytree(sender["run"], runs / "a"))
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    (run / ".hydra" / "config.yaml").write_text(bomb)
    done = command("magrpo-table", [str(runs), "--out", str(tmp_path / "t")], tmp_path)
    assert "anchors or aliases" in done.stderr, done.stderr[-2000:]


def test_a_deeply_nested_team_is_one_line_everywhere(sender, tmp_path, monkeypatch):
    from magrpo.team.team import Team

    team = download(sender, tmp_path, "team")
    deep = "[" * 100_000 + "]" * 100_000
    (team / "team.json").write_text((team / "team.json").read_text()[:-2] + f', "extra": {deep}}}\n')
    rehash(team)
    monkeypatch.setenv("MAGRPO_HOME", str(tmp_path / "home_receiver"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="nested"):
        Team.from_pretrained(team, device="cpu")
    done = command("magrpo-crossplay", [str(team), str(sender["team"]), "--out", str(tmp_path / "x")], tmp_path)
    err = lines_of(done, "magrpo-crossplay")
    assert done.returncode == 2 and len(err) == 1 and "nested" in err[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_a_saved_plus_group_line_is_one_line(sender, tmp_path):
    run = download(sender, tmp_path, "run")
    add_lines(run, ["+experiment=maporl"])
    done = command("magrpo-eval", [f"checkpoint={run}", f"hydra.run.dir={tmp_path / 'o'}"], tmp_path)
    err = lines_of(done, "magrpo-eval")
    assert done.returncode == 2 and len(err) == 1 and "experiment" in err[0], done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_every_refusal_is_a_config_error_from_python():
    from magrpo import ConfigError as Public
    from magrpo.core.plugins import PluginError
    from magrpo.tasks.reward_fns import RewardFunctionError

    for cls in (trust.UntrustedError, PluginError, RewardFunctionError, records.RecordError):
        assert issubclass(cls, Public), cls


def test_the_bounded_reader_refuses_what_is_not_a_plain_record(tmp_path):
    f = tmp_path / "r.yaml"
    f.write_text("a: &x 1\nb: *x\n")
    with pytest.raises(records.RecordError, match="anchors"):
        records.load_yaml(f)
    f.write_text("[" * 70 + "]" * 70)
    with pytest.raises(records.RecordError, match="nested more than"):
        records.load_json(f)
    f.write_text("x" * 100)
    with pytest.raises(records.RecordError, match="larger than"):
        records.load_json(f, limit=10)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(records.RecordError, match="not a regular file"):
        records.load_json(fifo)


# -- the docs say what the code holds ---------------------------------------------------------------------------


ROOT = Path(__file__).resolve().parent.parent


def test_the_key_class_table_on_the_security_page_is_the_codes():
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_tables_keys", ROOT / "scripts" / "docs_tables.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    page = (ROOT / "docs" / "security.md").read_text()
    assert script.spliced(page, "key-classes", script.key_classes_block()) == page
    assert "`feedback` | `api_key_env`, `local_model`, `url` |" in page


def test_every_test_the_threat_model_names_exists():
    import re

    page = (ROOT / "docs" / "security.md").read_text()
    section = page.split("### What a received directory can choose", 1)[1].split("<!-- key-classes", 1)[0]
    named = set(re.findall(r"`(test_\w+)`", section))
    assert len(named) >= 12
    sources = "".join(f.read_text() for f in (ROOT / "tests").rglob("test_*.py"))
    assert sorted(n for n in named if f"def {n}(" not in sources) == []


def test_a_moved_run_of_yours_is_adopted_on_your_say(sender, tmp_path, monkeypatch):
    from magrpo.cli.trust import main as trust_main

    monkeypatch.setenv("MAGRPO_HOME", str(sender["home"]))
    moved = download(sender, tmp_path, "run")
    assert not signatures.made_by_you(moved)
    assert trust_main(["--adopt", str(moved)]) == 0
    assert signatures.made_by_you(moved)
    monkeypatch.setenv("MAGRPO_HOME", str(tmp_path / "someone_else"))
    assert not signatures.made_by_you(moved)          # adopted by one user, not by another


def test_a_plugins_key_declares_its_class(monkeypatch):
    import dataclasses

    from magrpo import register_task
    from magrpo.core.schema import option
    from magrpo.tasks import TASKS
    from magrpo.tasks.length_ratio import LengthRatioTask
    from magrpo.validation.store import register_schemas

    @dataclasses.dataclass
    class MirrorConfig:
        name: str = "mirror_game"
        mirror: str | None = option(None, key_class="reach")      # where it fetches its items
        rounds: int = option(3, key_class="inert")
        note: str = "x"                                            # no class: a string is reach

    @register_task("mirror_game")
    class MirrorGame(LengthRatioTask):
        config_schema = MirrorConfig

    try:
        register_schemas()
        assert key_classes.key_class("task.mirror") == "reach" and key_classes.key_class("task.rounds") == "inert"
        assert key_classes.reaching("task", {"mirror": "http://x", "rounds": 5, "note": "y"}) == \
            [("task.mirror", "http://x"), ("task.note", "y")]
    finally:
        TASKS.unregister("mirror_game")
        key_classes._declared.clear()


# -- a second hostile read: what got through, and each now one line ------------------------------------------


def test_a_group_pick_whose_option_sets_a_reach_key_is_not_taken_up(sender, tmp_path, caplog):
    """feedback=expert picks conf/feedback/expert.yaml, whose url is a local endpoint; logger=wandb turns W&B on."""
    from magrpo.launch.run_config import option_keys

    run = download(sender, tmp_path, "run")
    lines = received.taken_lines(run, ["feedback=expert", "logger=wandb", "task=agree", "algo.num_turns=2"],
                              "overrides.yaml", own=False, options=option_keys)
    assert lines == ["task=agree", "algo.num_turns=2"]
    assert "not taken up: feedback=expert (its option sets feedback.url=" in caplog.text
    assert "not taken up: logger=wandb (its option sets logger.name=" in caplog.text
    assert received.taken_lines(run, ["feedback=expert"], "x", own=True, options=option_keys) == ["feedback=expert"]


def test_a_module_in_the_folder_that_holds_a_received_team_is_refused_at_any_depth(sender, tmp_path, monkeypatch):
    """downloads/evil.py beside downloads/team, named downloads.evil, found through the folder above."""
    from magrpo.team.team import Team

    team = download(sender, tmp_path, "team")
    (team.parent / "evil.py").write_text(PAYLOAD)
    edit_team(team, plugins=["downloads.evil"], config={"plugins": ["downloads.evil"]})
    monkeypatch.setenv("MAGRPO_HOME", str(tmp_path / "home_receiver"))
    monkeypatch.setenv("RECEIVED_MARKER", str(tmp_path / "RAN"))
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match="from beside"):
        Team.from_pretrained(team, device="cpu", trust_plugins=True)
    assert not (tmp_path / "RAN").exists()


def test_references_that_grow_past_the_budget_are_one_line(sender, tmp_path):
    runs = tmp_path / "downloads" / "runs"
    run = Path(shutil.copytree(sender["run"], runs / "a"))
    chain = "".join(f"  a{i}: '" + f"${{task.a{i - 1}}}" * 4 + "'\n" for i in range(1, 16))
    config = run / ".hydra" / "config.yaml"
    config.write_text(config.read_text().replace("task:\n", "task:\n  a0: " + "x" * 1000 + "\n" + chain, 1))
    done = command("magrpo-table", [str(runs), "--out", str(tmp_path / "t")], tmp_path)
    assert "expand past" in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]


def test_a_received_record_never_loosens_the_sandbox():
    assert key_classes.reaching("reward", {"sandbox_timeout_s": 1e5, "memory_mb": 10 ** 6, "per_test_timeout_s": 1,
                                           "max_timeouts": 1000, "max_workers": 64}) == [
        ("reward.sandbox_timeout_s", 1e5), ("reward.memory_mb", 10 ** 6), ("reward.max_timeouts", 1000),
        ("reward.max_workers", 64)]
    from magrpo.tasks.coding.reward import CodingRewardConfig

    defaults = CodingRewardConfig()
    assert {k: getattr(defaults, k) for k in key_classes.SANDBOX_LIMITS} == key_classes.SANDBOX_LIMITS


def test_an_export_of_a_received_run_is_yours_for_code_only(sender, tmp_path, monkeypatch):
    """Its hub ids and model names may have chosen nothing where it was exported; where it is used
    later they might: the export's signature does not make its reach keys yours."""
    run = download(sender, tmp_path, "run")
    out = tmp_path / "exported"
    done = command("magrpo-export", [str(run), str(out)], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    monkeypatch.setenv("MAGRPO_HOME", str(tmp_path / "home_receiver"))
    sig = signatures.signature(out)
    assert sig.valid and not sig.reach and not signatures.made_by_you(out)
    mine = tmp_path / "mine"
    done = command("magrpo-export", [str(sender["run"]), str(mine)], tmp_path,
                   MAGRPO_HOME=str(sender["home"]))
    assert done.returncode == 0
    monkeypatch.setenv("MAGRPO_HOME", str(sender["home"]))
    assert signatures.signature(mine).reach and signatures.made_by_you(mine)


@pytest.mark.parametrize("line", ["task.name=x/../../../elsewhere/PWNED", "seed=../x", "algo.name=../../a"])
def test_a_saved_name_that_would_place_the_run_directory_is_refused(sender, tmp_path, line):
    run = download(sender, tmp_path, "run")
    add_lines(run, [line])
    done = command("magrpo-eval", [f"checkpoint={run}"], tmp_path)
    err = lines_of(done, "magrpo-eval")
    assert done.returncode == 2 and len(err) == 1 and "not a plain name" in err[0], done.stderr[-2000:]
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "outputs").exists()


def test_a_reward_function_is_named_where_it_is_defined():
    from magrpo.tasks.reward_fns import resolve

    with pytest.raises(ConfigError, match="is a module"):
        resolve("magrpo.cli.paper:subprocess.run")
    with pytest.raises(ConfigError, match="is defined in"):
        resolve("magrpo.cli.paper:Path")
    assert resolve("tests.reward_fns_example:brevity").__name__ == "brevity"


def test_a_config_directory_named_with_an_interpolation_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="interpolation"):
        trust.check_refs(tmp_path, [trust.Ref("config dir", "file:///x_${oc.env:HOME}", "hydra.yaml")])


def test_python_start_up_hooks_beside_a_received_team_are_named(sender, tmp_path, monkeypatch):
    team = download(sender, tmp_path, "team")
    (team.parent / "sitecustomize.py").write_text("")
    monkeypatch.syspath_prepend(str(team.parent))
    monkeypatch.setenv("MAGRPO_HOME", str(tmp_path / "home_receiver"))
    with pytest.raises(trust.UntrustedError, match="sitecustomize.py was imported by Python itself"):
        trust.check_sys_path(team)


def _hostile(kind: str, root: Path) -> None:
    """Damage a copy of a team (or a run) as a sender would, for a reader that must stay one line."""
    team_dir = root
    if kind == "deep tokenizer config":
        f = team_dir / "agent_1" / "tokenizer_config.json"
        f.write_text("[" * 200_000 + "]" * 200_000)
    elif kind == "weight_map a list":
        (team_dir / "agent_1" / "model.safetensors.index.json").write_text(json.dumps({"weight_map": ["a"]}))
    elif kind == "a lone surrogate":
        info = json.loads((team_dir / "team.json").read_text())
        (team_dir / "team.json").write_text(json.dumps(info).replace('"task": "', '"task": "\\ud800', 1))
    elif kind == "a link that loops":
        (team_dir / "agent_1" / "loop").symlink_to("loop")
    rehash(team_dir)
    if kind == "a link that loops":
        m = json.loads((team_dir / "manifest.json").read_text())
        m["files"]["agent_1/loop"] = {"size": 0, "sha256": "0" * 64}
        (team_dir / "manifest.json").write_text(json.dumps(m))


@pytest.mark.parametrize("kind", ["deep tokenizer config", "weight_map a list", "a lone surrogate",
                                  "a link that loops"])
def test_a_damaged_team_is_one_line_for_eval_and_crossplay(sender, tmp_path, kind):
    team = download(sender, tmp_path, "team")
    _hostile(kind, team)
    for prog, args in (("magrpo-eval", [f"team={team}", f"hydra.run.dir={tmp_path / 'e'}"]),
                       ("magrpo-crossplay", [str(team), str(sender["team"]), "--out", str(tmp_path / "x")])):
        done = command(prog, args, tmp_path)
        assert done.returncode in (1, 2) and "Traceback" not in done.stderr, (prog, done.stderr[-2000:])
        assert len(lines_of(done, prog)) == 1, (prog, done.stderr[-2000:])


@pytest.mark.parametrize("damage", ["metrics fifo", "owner fifo", "deep metrics line"])
def test_resuming_a_received_run_in_place_never_hangs_on_its_files(sender, tmp_path, damage):
    run = download(sender, tmp_path, "run")
    if damage == "metrics fifo":
        (run / "metrics.jsonl").unlink()
        os.mkfifo(run / "metrics.jsonl")
    elif damage == "owner fifo":
        os.mkfifo(run / ".magrpo-owner.json")
    else:
        with open(run / "metrics.jsonl", "a") as f:
            f.write("[" * 100_000 + "]" * 100_000 + "\n")
    done = command("magrpo-train", [f"resume={run}", "max_steps=3", "trust_plugins=true"], tmp_path)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode in (0, 1, 2), done.stderr[-2000:]


@pytest.mark.parametrize("damage", ["step NaN", "task name 300 long", "pid 10**30", "trials not objects"])
def test_magrpo_table_reads_hostile_run_files_in_one_line(sender, tmp_path, damage):
    runs = tmp_path / "downloads" / "runs"
    run = Path(shutil.copytree(sender["run"], runs / "a"))
    summary = json.loads((run / "summary.json").read_text())
    args = []
    if damage == "step NaN":
        with open(run / "metrics.jsonl", "a") as f:
            f.write('{"step": NaN, "eval/reward_mean": 1.0}\n{"step": Infinity, "eval/reward_mean": 1.0}\n')
    elif damage == "task name 300 long":
        summary["config"]["task"] = "t" * 300
    elif damage == "pid 10**30":
        summary.update(status="running", pid=10 ** 30, host=os.uname().nodename)
    else:
        tuning = tmp_path / "tuning"
        tuning.mkdir()
        (tuning / "r.json").write_text(json.dumps({"task": "agree", "row": "magrpo", "space": {}, "trials": [1, 2]}))
        args = ["--tuning", str(tuning)]
    (run / "summary.json").write_text(json.dumps(summary))
    for layout in ("generic", "paper"):
        done = command("magrpo-table", [str(runs), "--out", str(tmp_path / f"t_{layout}"), "--layout", layout, *args],
                       tmp_path)
        assert "Traceback" not in done.stderr and done.returncode in (0, 2), (layout, done.stderr[-2000:])


def test_a_saved_override_nested_too_deep_is_one_line(sender, tmp_path):
    run = download(sender, tmp_path, "run")
    add_lines(run, ["+task.x=" + "[" * 300 + "]" * 300])
    done = command("magrpo-eval", [f"checkpoint={run}", f"hydra.run.dir={tmp_path / 'o'}"], tmp_path)
    err = lines_of(done, "magrpo-eval")
    assert done.returncode == 2 and len(err) == 1 and "nested" in err[0] and "Traceback" not in done.stderr, \
        done.stderr[-2000:]
