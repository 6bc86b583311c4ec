"""Teams, runs and checkpoints made by someone else (README, "Sharing teams and runs safely").

Each test tampers with a real exported team, run or checkpoint the way a hostile or careless
sender could, with a manifest rewritten to match (an attacker can hash files too), and checks that
loading it runs no code of it (every payload writes a marker file; the marker must not appear),
reads nothing outside it, and is refused with one line where it is wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path

import pytest

from magrpo.cli import export
from magrpo.cli.evaluate import main as eval_main
from magrpo.cli.train import main as train_main
from magrpo.core.schema import ConfigError, SetupError
from tests.conftest import run_cli

TINY = ["task=length_ratio", "debug=smoke", "algo.max_new_tokens=8", "algo.num_generations=2",
        "algo.max_prompt_length=48"]


# -- fixtures: one trained run, one exported team; every test tampers with a copy ---------------------


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("run")
    assert run_cli(train_main, "magrpo-train", [*TINY, f"output_dir={root / 'run'}",
                                                f"hydra.run.dir={root / 'run'}"]) == 0
    return root / "run"


@pytest.fixture(scope="module")
def team_dir(run_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("team") / "team"
    assert export.main([str(run_dir), str(out)]) == 0
    return out


@pytest.fixture
def team(team_dir, tmp_path) -> Path:
    """A fresh copy of the exported team."""
    return Path(shutil.copytree(team_dir, tmp_path / "team"))


@pytest.fixture
def run(run_dir, tmp_path) -> Path:
    """A fresh copy of the trained run (its .hydra/ and checkpoints)."""
    return Path(shutil.copytree(run_dir, tmp_path / "run", symlinks=True))


@pytest.fixture
def marker(tmp_path) -> Path:
    return tmp_path / "PAYLOAD_RAN"


def rehash(root: Path) -> None:
    """Rewrite root's manifest.json over every file now there (what a sender who edits files does)."""
    m = json.loads((root / "manifest.json").read_text())
    files = {}
    for f in sorted(root.rglob("*")):
        if f.is_file() and f.name != "manifest.json":
            data = f.read_bytes()
            files[f.relative_to(root).as_posix()] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    m["files"] = files
    (root / "manifest.json").write_text(json.dumps(m))


def edit_team(root: Path, change) -> None:
    """team.json replaced by change(team.json), the manifest rewritten to match."""
    info = change(json.loads((root / "team.json").read_text()))
    (root / "team.json").write_text(json.dumps(info))
    rehash(root)


class Payload:
    """Unpickling it writes the marker file."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('ran')",))


def _load_team(path: Path, **kw):
    from magrpo.team.team import Team

    return Team.from_pretrained(path, device="cpu", **kw)


def _one_line_refusal(fn, *exc_types) -> str:
    with pytest.raises(exc_types or (ConfigError, SetupError)) as info:
        fn()
    msg = str(info.value)
    assert "\n" not in msg and "Traceback" not in msg, msg
    return msg


def _cli_error(main, prog: str, args: list[str], capsys) -> tuple[int, list[str]]:
    capsys.readouterr()
    code = run_cli(main, prog, args)
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip() and not x.startswith("[")]
    return code, lines


# -- 1. code that nobody asked for -------------------------------------------------------------------------------


def _plant_remote_code(team: Path, marker: Path) -> None:
    """agent_1 ships Python (config.json auto_map) that writes the marker when imported, and the
    team's own config asks for trust_remote_code."""
    agent = team / "agent_1"
    code = f"open({str(marker)!r}, 'w').write('ran')\nfrom transformers import LlamaConfig, LlamaForCausalLM\n"
    (agent / "evil_config.py").write_text(code + "class EvilConfig(LlamaConfig):\n    model_type = 'llama'\n")
    (agent / "evil_model.py").write_text(code + "class EvilModel(LlamaForCausalLM):\n    pass\n")
    cfg = json.loads((agent / "config.json").read_text())
    cfg["auto_map"] = {"AutoConfig": "evil_config.EvilConfig", "AutoModelForCausalLM": "evil_model.EvilModel"}
    (agent / "config.json").write_text(json.dumps(cfg))

    def trust(info):
        for spec in info["config"]["agents"]["models"]:
            spec["trust_remote_code"] = True
        return info
    edit_team(team, trust)


def test_a_team_cannot_opt_in_to_remote_code_for_its_loader(team, marker):
    _plant_remote_code(team, marker)
    try:
        loaded = _load_team(team)
        assert all(not getattr(a.model.config, "auto_map", None) or type(a.model).__name__ != "EvilModel"
                   for a in loaded.agents)
    except (ConfigError, SetupError) as e:
        assert "\n" not in str(e)
    assert not marker.exists()


def test_remote_code_runs_when_the_caller_asks_for_it(team, marker):
    _plant_remote_code(team, marker)
    try:
        _load_team(team, trust_remote_code=True)
    except (ConfigError, SetupError):
        pass
    assert marker.exists()      # the switch is real: the caller's own call opts in


def test_magrpo_eval_of_a_team_does_not_run_its_code(team, marker, tmp_path, capsys):
    _plant_remote_code(team, marker)
    # the team's overrides.yaml asks for it too
    (team / "overrides.yaml").write_text((team / "overrides.yaml").read_text()
                                         + "- ++agents.models.0.trust_remote_code=true\n")
    rehash(team)
    code, _ = _cli_error(eval_main, "magrpo-eval", [f"team={team}", "eval.num_items=1",
                                                    f"hydra.run.dir={tmp_path / 'ev'}"], capsys)
    assert not marker.exists()


def test_magrpo_eval_runs_a_teams_code_when_your_command_line_asks(team, marker, tmp_path, capsys):
    _plant_remote_code(team, marker)
    code, lines = _cli_error(eval_main, "magrpo-eval", [f"team={team}", "eval.num_items=1",
                                                        "++agents.models.0.trust_remote_code=true",
                                                        f"hydra.run.dir={tmp_path / 'ev'}"], capsys)
    assert marker.exists(), (code, lines)


def _pickle_file(path: Path, marker: Path) -> None:
    path.write_bytes(pickle.dumps(Payload(marker)))


@pytest.mark.parametrize("flag", ["--experimental-rerun={pkl}", "-m", "--cfg=job", "seed=0,1"])
def test_saved_overrides_that_are_flags_or_sweeps_are_refused(run, marker, tmp_path, capsys, flag):
    pkl = tmp_path / "config.pickle"
    _pickle_file(pkl, marker)
    saved = run / ".hydra" / "overrides.yaml"
    saved.write_text(saved.read_text() + f"- {flag.format(pkl=pkl)}\n")
    code, lines = _cli_error(train_main, "magrpo-train", [f"resume={run}", "max_steps=4",
                                                          f"hydra.run.dir={run}"], capsys)
    assert code == 2 and len(lines) == 1, lines
    assert "saved override" in lines[0] and flag.format(pkl=pkl)[:6] in lines[0]
    assert not marker.exists()
    code, lines = _cli_error(eval_main, "magrpo-eval", [f"checkpoint={run}", f"hydra.run.dir={tmp_path / 'ev'}"],
                             capsys)
    assert code == 2 and len(lines) == 1 and "saved override" in lines[0], lines
    assert not marker.exists()


def test_a_pickle_payload_in_the_trainer_state_is_never_run(run, marker, tmp_path, capsys):
    from magrpo.core.checkpoint import resolve

    ckpt = resolve(run, "resume")
    _pickle_file(ckpt / "trainer_state.pt", marker)
    rehash(ckpt)
    code, lines = _cli_error(train_main, "magrpo-train", [f"resume={run}", "max_steps=4", f"hydra.run.dir={run}"],
                             capsys)
    assert code == 2 and len(lines) == 1, lines
    assert "trainer_state.pt" in lines[0] and "data only" in lines[0]
    assert not marker.exists()


def test_a_torch_zip_payload_in_the_trainer_state_is_never_run(run, marker, capsys):
    """The same through torch.save's own format: an object inside an otherwise valid state."""
    import torch

    from magrpo.core.checkpoint import resolve

    ckpt = resolve(run, "resume")
    state = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    state["evals"] = [Payload(marker)]
    torch.save(state, ckpt / "trainer_state.pt")
    rehash(ckpt)
    code, lines = _cli_error(train_main, "magrpo-train", [f"resume={run}", "max_steps=4", f"hydra.run.dir={run}"],
                             capsys)
    assert code == 2 and len(lines) == 1 and "trainer_state.pt" in lines[0], lines
    assert not marker.exists()


def test_an_untampered_checkpoint_still_resumes(run, tmp_path):
    """weights_only loading reads what the trainer saves (RNG states included)."""
    assert run_cli(train_main, "magrpo-train", [f"resume={run}", "max_steps=3", f"hydra.run.dir={run}"]) == 0
    assert json.loads((run / "summary.json").read_text())["steps"] == 3


# -- 2. nothing outside the directory, nothing outside the manifest ------------------------------------


@pytest.mark.parametrize("name", ["../outside.txt", "/etc/hostname", "agent_1/../../outside.txt", "./README.md"])
def test_manifest_names_that_leave_the_team_are_refused(team, tmp_path, name):
    outside = tmp_path / "outside.txt"
    outside.write_text("secret")
    m = json.loads((team / "manifest.json").read_text())
    target = (team / name) if not name.startswith("/") else Path(name)
    data = target.read_bytes() if target.is_file() else b""
    m["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (team / "manifest.json").write_text(json.dumps(m))
    msg = _one_line_refusal(lambda: _load_team(team))
    assert repr(name) in msg or name in msg


@pytest.mark.parametrize("key", ["load", "tokenizer"])
def test_team_json_paths_that_leave_the_team_are_refused(team, run, key):
    def point_out(info):
        info["models"][0][key] = str(run / "checkpoints" / "step_2" / "agent_1")
        return info
    edit_team(team, point_out)
    msg = _one_line_refusal(lambda: _load_team(team))
    assert f"models[0].{key}" in msg


def test_a_weight_file_linked_outside_the_team_is_refused(team, tmp_path):
    weights = next((team / "agent_1").glob("*.safetensors"))
    copy = tmp_path / "elsewhere.safetensors"
    shutil.copyfile(weights, copy)
    weights.unlink()
    weights.symlink_to(copy)              # same bytes, so the manifest's hash still matches
    msg = _one_line_refusal(lambda: _load_team(team))
    assert "outside" in msg and "agent_1" in msg


def test_an_agent_folder_linked_outside_the_team_is_refused(team, tmp_path):
    moved = Path(shutil.move(str(team / "agent_2"), str(tmp_path / "agent_2_elsewhere")))
    (team / "agent_2").symlink_to(moved, target_is_directory=True)
    msg = _one_line_refusal(lambda: _load_team(team))
    assert "outside" in msg


def test_a_hub_cache_snapshot_whose_files_link_to_its_blobs_loads(team_dir, tmp_path):
    """What snapshot_download leaves: snapshots/<rev>/<file> -> ../../blobs/<hash>."""
    repo = tmp_path / "hub" / "models--me--team"
    snap = repo / "snapshots" / "abc123"
    (repo / "blobs").mkdir(parents=True)
    for f in sorted(team_dir.rglob("*")):
        if f.is_file():
            digest = hashlib.sha256(f.read_bytes()).hexdigest()
            shutil.copyfile(f, repo / "blobs" / digest)
            link = snap / f.relative_to(team_dir)
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(repo / "blobs" / digest, link.parent))
    loaded = _load_team(snap)
    assert loaded.num_agents == 2


def test_an_unlisted_weight_file_is_refused_not_loaded(team):
    import torch
    from safetensors.torch import load_file, save_file

    listed = next((team / "agent_1").glob("*.safetensors"))
    state = {k: torch.zeros_like(v) for k, v in load_file(str(listed)).items()}
    save_file(state, str(team / "agent_1" / "zz_extra.safetensors"))   # sorts after the listed one
    msg = _one_line_refusal(lambda: _load_team(team))
    assert "zz_extra.safetensors" in msg and "not listed" in msg


def test_an_unlisted_pickle_weight_file_is_refused(team, marker):
    _pickle_file(team / "agent_1" / "pytorch_model.bin", marker)
    msg = _one_line_refusal(lambda: _load_team(team))
    assert "pytorch_model.bin" in msg
    assert not marker.exists()


def test_a_listed_pickle_weight_file_is_never_unpickled(team, marker):
    """A full-weights team whose listed weights are a pickle: safetensors or nothing."""
    for f in (team / "agent_1").glob("*.safetensors"):
        f.unlink()
    _pickle_file(team / "agent_1" / "pytorch_model.bin", marker)
    rehash(team)
    _one_line_refusal(lambda: _load_team(team))
    assert not marker.exists()


def test_an_unlisted_file_in_a_checkpoint_is_refused(run, tmp_path, capsys):
    from magrpo.core.checkpoint import resolve

    ckpt = resolve(run, "resume")
    shutil.copyfile(next((ckpt / "agent_1").glob("*.safetensors")), ckpt / "agent_1" / "zz_extra.safetensors")
    code, lines = _cli_error(eval_main, "magrpo-eval", [f"checkpoint={ckpt}", f"hydra.run.dir={tmp_path / 'ev'}"],
                             capsys)
    assert code == 2 and len(lines) == 1 and "zz_extra.safetensors" in lines[0], lines


def test_a_sharded_index_that_names_a_file_outside_is_refused(team, tmp_path):
    (team / "agent_1" / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": {"lm_head.weight": "../../outside.safetensors"}}))
    rehash(team)
    msg = _one_line_refusal(lambda: _load_team(team))
    assert "outside.safetensors" in msg


def test_a_tokenizer_setting_that_names_a_file_outside_is_refused(team, tmp_path):
    f = team / "agent_1" / "tokenizer_config.json"
    cfg = json.loads(f.read_text())
    cfg["tokenizer_file"] = str(tmp_path / "elsewhere.json")
    f.write_text(json.dumps(cfg))
    rehash(team)
    msg = _one_line_refusal(lambda: _load_team(team))
    assert "tokenizer_config.json" in msg


# -- 3. one line for every malformed team.json -----------------------------------------------------------


MALFORMED = {
    "a list": lambda info: [info],
    "a string": lambda info: "team",
    "null": lambda info: None,
    "no config": lambda info: {k: v for k, v in info.items() if k != "config"},
    "config a list": lambda info: {**info, "config": [1, 2]},
    "config without agents": lambda info: {**info, "config": {k: v for k, v in info["config"].items() if k != "agents"}},
    "num_agents a string": lambda info: {**info, "num_agents": "2"},
    "num_agents true": lambda info: {**info, "num_agents": True},
    "more agents than held": lambda info: {**info, "num_agents": 3},
    "models not a list": lambda info: {**info, "models": {"agent_1": {}}},
    "a model entry a string": lambda info: {**info, "models": ["agent_1", "agent_2"]},
    "a model without load": lambda info: {**info, "models": [{k: v for k, v in m.items() if k != "load"}
                                                              for m in info["models"]]},
    "spec out of range": lambda info: {**info, "models": [{**m, "spec": 7} for m in info["models"]]},
    "roles a dict": lambda info: {**info, "roles": {}},
    "turns a number": lambda info: {**info, "turns": 2},
    "weights unknown": lambda info: {**info, "weights": "pickles"},
    "format 2": lambda info: {**info, "format": 2},
    "the task disagrees with its config": lambda info: {**info, "task": "tldr"},
    "the algorithm disagrees": lambda info: {**info, "algorithm": "ippo"},
    "the topology disagrees": lambda info: {**info, "topology": "sequential"},
    "a config with an unknown key": lambda info: {**info, "config": {**info["config"], "algo": {
        **info["config"]["algo"], "num_generationz": 3}}},
    "a config whose value has the wrong type": lambda info: {**info, "config": {**info["config"], "algo": {
        **info["config"]["algo"], "num_turns": "many"}}},
    "config agents claim 3 agents": lambda info: {**info, "config": {**info["config"], "agents": {
        **info["config"]["agents"], "num_agents": 3}}},
    "overrides with a flag": lambda info: {**info, "overrides": ["--experimental-rerun=x.pickle"]},
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_every_malformed_team_json_is_one_line(team, case):
    edit_team(team, MALFORMED[case])
    msg = _one_line_refusal(lambda: _load_team(team), ConfigError)
    assert "team.json" in msg


@pytest.mark.parametrize("case", ["a list", "more agents than held", "the task disagrees with its config"])
def test_magrpo_eval_refuses_a_malformed_team_in_one_line(team, case, tmp_path, capsys):
    edit_team(team, MALFORMED[case])
    code, lines = _cli_error(eval_main, "magrpo-eval", [f"team={team}", f"hydra.run.dir={tmp_path / 'ev'}"], capsys)
    assert code == 2 and len(lines) == 1 and "team.json" in lines[0], lines


def test_a_chat_template_the_sandbox_blocks_is_one_line(team, tmp_path, capsys):
    evil = "{{ ''.__class__.__mro__[1].__subclasses__() }}{% for m in messages %}{{ m.content }}{% endfor %}"
    for agent in ("agent_1", "agent_2"):
        f = team / agent / "tokenizer_config.json"
        cfg = json.loads(f.read_text())
        cfg["chat_template"] = evil
        f.write_text(json.dumps(cfg))
        for extra in (team / agent).glob("chat_template.*"):
            extra.unlink()
    rehash(team)
    msg = _one_line_refusal(lambda: _load_team(team), SetupError)
    assert "Jinja sandbox" in msg
    code, lines = _cli_error(eval_main, "magrpo-eval", [f"team={team}", f"hydra.run.dir={tmp_path / 'ev'}"], capsys)
    assert code == 1 and len(lines) == 1 and "Jinja sandbox" in lines[0], lines


def test_a_relative_team_path_is_a_directory_not_a_hub_id(team, tmp_path, capsys, monkeypatch):
    """magrpo-eval team=team whose weights cannot load names the file, not a hub download."""
    weights = next((team / "agent_2").glob("*.safetensors"))
    weights.write_bytes(b"not safetensors")
    rehash(team)
    monkeypatch.chdir(team.parent)
    code, lines = _cli_error(eval_main, "magrpo-eval", ["team=team", f"hydra.run.dir={tmp_path / 'ev'}"], capsys)
    assert code == 1 and len(lines) == 1, lines
    assert "local cache" not in lines[0] and "hf download" not in lines[0]
    assert "agent_2" in lines[0]


def test_a_state_saved_by_an_older_magrpo_with_its_config_enums_still_loads(tmp_path):
    """Older checkpoints pickled the typed config (its Enums) into trainer_state.pt: those classes
    of magrpo's own schemas are allowed; nothing else is."""
    import torch

    from magrpo.core.checkpoint import CheckpointError, load_state
    from magrpo.tasks.writing.reward import TransitionSource

    torch.save({"step": 2, "config": {"reward": {"transition_source": TransitionSource.both}}},
               tmp_path / "trainer_state.pt")
    assert load_state(tmp_path)["config"]["reward"]["transition_source"] is TransitionSource.both
    torch.save({"step": 2, "config": {"x": Path("/etc")}}, tmp_path / "trainer_state.pt")
    with pytest.raises(CheckpointError, match="other than tensors and plain data"):
        load_state(tmp_path)


@pytest.mark.parametrize("damage", ["not safetensors", "another shape"])
def test_listed_weights_that_do_not_load_are_one_line(team, damage):
    import torch
    from safetensors.torch import load_file, save_file

    f = next((team / "agent_2").glob("*.safetensors"))
    if damage == "not safetensors":
        f.write_bytes(b"\x00" * 64)
    else:
        save_file({k: torch.zeros(v.shape[0] + 1, *v.shape[1:]) for k, v in load_file(str(f)).items()}, str(f))
    rehash(team)
    msg = _one_line_refusal(lambda: _load_team(team), SetupError)
    assert "agent_2" in msg


def test_a_yaml_payload_in_saved_overrides_is_refused_not_run(run, marker, tmp_path, capsys):
    payload = f"open({str(marker)!r}, 'w').write('ran')"
    (run / ".hydra" / "overrides.yaml").write_text(f"- !!python/object/apply:exec [{json.dumps(payload)}]\n")
    code, lines = _cli_error(eval_main, "magrpo-eval", [f"checkpoint={run}", f"hydra.run.dir={tmp_path / 'ev'}"],
                             capsys)
    assert code == 2 and len(lines) == 1 and "overrides.yaml" in lines[0], lines
    assert not marker.exists()


def test_a_key_added_since_a_checkpoint_was_saved_is_no_change_at_null():
    """An older checkpoint lacks reward.fn and plugins; at null (or at their defaults) they block nothing,
    while a real value still counts."""
    from magrpo.core.checkpoint import config_changes

    old = {"reward": {"shift": 0.0}, "algo": {"name": "magrpo"}}
    assert config_changes(old, {"reward": {"shift": 0.0, "fn": None, "max": None}, "algo": {"name": "magrpo"}}) == []
    assert config_changes(old, {"reward": {"shift": 0.0, "fn": "m:f"}, "algo": {"name": "magrpo"}}) == \
        [("reward.fn", "<absent>", "m:f")]
