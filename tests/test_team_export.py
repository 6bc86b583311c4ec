"""A trained team as one artifact: magrpo-export writes it, `Team.from_pretrained` and
`magrpo-eval team=` read it back (offline), and it behaves exactly as the run's checkpoint did.

The runs are trained once per module (tiny builtin model, debug=smoke, seconds on the CPU) through
the real magrpo-train entry point with `output_dir=DIR`, so they also check that such a directory
keeps its .hydra/ and can be taken up without repeating its overrides."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from magrpo.cli import export
from magrpo.cli.evaluate import main as eval_main
from magrpo.cli.train import main as train_main
from tests.conftest import compose_cfg, run_cli, small_tmpfs, tree_digest

TINY = ["debug=smoke", "algo.max_new_tokens=12", "algo.num_generations=2", "algo.max_prompt_length=64"]
RUNS = {
    "separate": ["task=length_ratio", *TINY],
    "lora": ["task=length_ratio", "agents=tiny_lora", *TINY],
    "ppo": ["task=length_ratio", "algo=ppo", *TINY],
    "shared": ["task=length_ratio", "agents.share_policy=true", *TINY],
}
TIMING = ("response_time_s", "reward_time_s")


def _train(args: list[str], root: Path) -> Path:
    """magrpo-train ARGS output_dir=ROOT/run (Hydra's own directory elsewhere): the run directory."""
    code = run_cli(train_main, "magrpo-train", [*args, f"output_dir={root / 'run'}", f"hydra.run.dir={root / 'hydra'}"])
    assert code == 0
    return root / "run"


def _eval(args: list[str], out: Path, capsys=None) -> tuple[int, str]:
    if capsys is not None:
        capsys.readouterr()
    code = run_cli(eval_main, "magrpo-eval", [*args, "eval.num_items=2", f"hydra.run.dir={out}"])
    return code, capsys.readouterr().err if capsys is not None else ""


def _export(argv: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    code = export.main([str(a) for a in argv])
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def _untimed(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.endswith(TIMING)}


def _error_lines(err: str) -> list[str]:
    """stderr without the library's log lines ("[magrpo] ...")."""
    return [line for line in err.splitlines() if line.strip() and not line.startswith("[")]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Lazily trained runs (each once per module): kind -> run directory."""
    done: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in done:
            done[kind] = _train(RUNS[kind], tmp_path_factory.mktemp(kind))
        return done[kind]

    return get


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    """kind -> the run's team exported with magrpo-export (once per module)."""
    done: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in done:
            out = tmp_path_factory.mktemp(f"{kind}_team") / "team"
            assert export.main([str(trained(kind)), str(out)]) == 0
            done[kind] = out
        return done[kind]

    return get


def _state(agent) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu() for k, v in agent.model.state_dict().items()}


def _assert_same_weights(a, b) -> None:
    sa, sb = _state(a), _state(b)
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k


# -- 1. the export evaluates as the checkpoint does -----------------------------------------------


@pytest.mark.parametrize("kind", ["separate", "lora", "ppo"])
def test_the_exported_team_reproduces_the_checkpoints_eval_exactly(kind, trained, exported, tmp_path):
    run, team = trained(kind), exported(kind)
    assert _eval([f"checkpoint={run}"], tmp_path / "ckpt")[0] == 0
    assert _eval([f"team={team}"], tmp_path / "team")[0] == 0
    by_ckpt, by_team = _json(tmp_path / "ckpt" / "eval.json"), _json(tmp_path / "team" / "eval.json")
    assert by_team["team"] == str(team) and by_team["checkpoint"] is None
    assert by_ckpt["task"] == by_team["task"] == "length_ratio"
    a, b = by_ckpt["results"]["team"], by_team["results"]["team"]
    assert set(a) == set(b) and "reward_mean" in a
    assert _untimed(a) == _untimed(b)         # exactly: same weights, same sampling, same seed
    # the team's settings came from its overrides.yaml, as checkpoint= takes them from .hydra/
    assert by_team["config"]["algo"]["max_new_tokens"] == 12
    assert by_team["config"]["algo"]["name"] == by_ckpt["config"]["algo"]["name"]
    assert by_team["from_run"]["run_dir"] == str(team)
    assert by_team["from_run"]["saved_overrides"] == str(team / "overrides.yaml")
    assert by_team["from_run"]["inherited"]["task"] == "length_ratio"
    # a table shows both as the trained team, never as the untrained "baselines"
    assert _json(tmp_path / "team" / "summary.json")["config"]["algo"] == "team"
    assert _json(tmp_path / "ckpt" / "summary.json")["config"]["algo"] == "team"


# -- 2. weights and layout ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["separate", "lora", "ppo", "shared"])
def test_the_exported_weights_are_the_checkpoints(kind, trained, exported):
    from magrpo.models.agents import policy_agents
    from magrpo.team.team import Team, default_hardware, load_team_agents

    run, team_dir = trained(kind), exported(kind)
    from_run, loaded = Team.from_run(run, device="cpu"), Team.from_pretrained(team_dir, device="cpu")
    assert [a.name for a in loaded.agents] == [a.name for a in from_run.agents]
    for a, b in zip(policy_agents(from_run.agents), policy_agents(loaded.agents)):
        assert a.policy_name == b.policy_name
        _assert_same_weights(a, b)
    # ...and training changed them: the comparison would catch an export of the base models
    base = load_team_agents(from_run.config, default_hardware("cpu"), None)
    assert any(not torch.equal(x, y) for x, y in zip(_state(base[0]).values(), _state(from_run.agents[0]).values()))

    names = sorted(p.name for p in team_dir.iterdir())
    info = _json(team_dir / "team.json")
    if kind == "lora":
        assert names == ["README.md", "agent_1", "agent_2", "base", "manifest.json", "overrides.yaml", "signature.json",
                         "team.json"]
        assert info["weights"] == "adapters"
        assert [m["load"] for m in info["models"]] == ["base", "base"]
        assert (team_dir / "base" / "model.safetensors").is_file()
        for agent in ("agent_1", "agent_2"):
            files = {p.name for p in (team_dir / agent).iterdir()}
            assert "adapter_config.json" in files and "adapter_model.safetensors" in files
            assert "model.safetensors" not in files       # the base is written once, not per agent
    elif kind == "ppo":           # one model, the single-agent form
        assert names == ["README.md", "agent_1", "manifest.json", "overrides.yaml", "signature.json", "team.json"]
        assert info["weights"] == "full" and [m["policy"] for m in info["models"]] == ["agent_1"]
    elif kind == "shared":        # one policy plays both roles: written once
        assert names == ["README.md", "manifest.json", "overrides.yaml", "policy", "signature.json", "team.json"]
        assert info["weights"] == "full" and [m["policy"] for m in info["models"]] == ["policy"]
        assert [r["policy"] for r in info["roles"]] == ["policy", "policy"]
        assert (team_dir / "policy" / "model.safetensors").is_file()
    else:
        assert names == ["README.md", "agent_1", "agent_2", "manifest.json", "overrides.yaml", "signature.json", "team.json"]
        assert info["weights"] == "full"
        for agent in ("agent_1", "agent_2"):
            assert (team_dir / agent / "model.safetensors").is_file()


# -- 3. team.json, the model card, the manifest -----------------------------------------------------


def test_an_exported_team_has_the_mode_mkdir_gives(exported):
    """Not mkdtemp's 0700: a team (and a checkpoint) is made to be shared."""
    import os

    mask = os.umask(0)
    os.umask(mask)
    assert (exported("separate").stat().st_mode & 0o777) == 0o777 & ~mask


def test_team_json_the_model_card_and_the_manifest(trained, exported):
    run, team_dir = trained("separate"), exported("separate")
    info = _json(team_dir / "team.json")
    assert info["format"] == 1 and info["task"] == "length_ratio" and info["algorithm"] == "magrpo"
    assert info["num_agents"] == 2 and info["level"] == "separate" and info["topology"] == "simultaneous"
    assert info["turns"] == {"num_turns": 1, "discount": 1.0, "early_termination_threshold": None}
    assert info["feedback"]["mode"] == "none"
    assert info["assembly"] == "the agents' answers in agent order, separated by a blank line"
    assert [r["agent"] for r in info["roles"]] == ["agent_1", "agent_2"]
    assert all(r["model"] == "builtin:tiny" for r in info["roles"])
    p1, p2 = (r["example_prompt"] for r in info["roles"])
    assert p1 and p2 and p1 != p2               # the roles' prompts differ (length_ratio: short and long)
    assert [m["policy"] for m in info["models"]] == ["agent_1", "agent_2"]
    assert info["config"]["task"]["name"] == "length_ratio" and info["config"]["algo"]["max_new_tokens"] == 12
    assert info["sampling"]["max_new_tokens"] == 12
    assert "task=length_ratio" in info["overrides"] and not any(o.startswith("debug") for o in info["overrides"])
    assert info["source"]["run_dir"] == str(run) and info["source"]["step"] == 2
    summary = _json(run / "summary.json")
    assert info["final_eval"] == summary["final_eval"]

    card = (team_dir / "README.md").read_text()
    assert "length_ratio" in card and "magrpo" in card
    assert f"| reward_mean | {summary['final_eval']['reward_mean']:.4f} |" in card
    assert f"| reward_std | {summary['final_eval']['reward_std']:.4f} |" in card
    assert "task=length_ratio" in card
    # how many items the score came from, and a word when they are too few to be the team's score
    n = int(summary["final_eval"]["num_items"])
    assert f"On {n} item(s) of the task's eval split" in card
    assert ("too few to read as the team's score" in card) == (n < 16)

    manifest = _json(team_dir / "manifest.json")
    on_disk = {p.relative_to(team_dir).as_posix() for p in team_dir.rglob("*") if p.is_file()}
    assert set(manifest["files"]) == on_disk - {"manifest.json", "signature.json"}    # the seal over the manifest
    import hashlib

    for name, meta in manifest["files"].items():
        assert hashlib.sha256((team_dir / name).read_bytes()).hexdigest() == meta["sha256"], name


def test_the_model_card_of_a_ppo_team_names_its_algorithm(exported):
    info = _json(exported("ppo") / "team.json")
    assert info["algorithm"] == "ppo" and info["num_agents"] == 1 and info["form"] == "single"
    assert "trained with `ppo`" in (exported("ppo") / "README.md").read_text()


# -- 4. using a team ---------------------------------------------------------------------------------


def test_answers_have_the_teams_shape_and_repeat_under_a_seed(trained, exported):
    from magrpo.team.team import Team, TeamAnswer

    team = Team.from_pretrained(exported("separate"), device="cpu")
    items = team.task.load("eval")[:3]
    outs = team.answer_batch(items, seed=3)
    assert len(outs) == 3 and all(isinstance(o, TeamAnswer) for o in outs)
    for item, o in zip(items, outs):
        assert len(o.parts) == 2 and len(o.turns) == 1 and o.turns[0] == o.parts
        assert o.answer == team.task.assemble(item, o.parts) == "\n\n".join(p.strip() for p in o.parts)
        assert isinstance(o.reward, float)
    assert team.answer_batch(items, seed=3) == outs
    assert team.answer(items[0], seed=3) == team.answer_batch(items[:1], seed=3)[0]
    others = team.answer_batch(items, seed=4)
    assert [o.parts for o in others] != [o.parts for o in outs], "another seed samples other answers"
    greedy = team.answer_batch(items, do_sample=False, seed=1)
    assert greedy == team.answer_batch(items, do_sample=False, seed=2)
    assert team.answer_batch([]) == []
    with pytest.raises(TypeError, match="items"):
        team.answer_batch(["a prompt"])

    # the run's checkpoint as a Team answers exactly as its export does
    from_run = Team.from_run(trained("separate"), device="cpu")
    assert from_run.answer_batch(items, seed=3) == outs

    one = team.generate(["Say hi.", "Say bye."], seed=5)
    assert isinstance(one, list) and len(one) == 2 and all(isinstance(t, str) for t in one)
    assert team.generate(["Say hi.", "Say bye."], seed=5) == one
    assert from_run.generate(["Say hi.", "Say bye."], seed=5) == one
    many = team.generate([["Say hi.", "Say bye."], ["Count.", "Stop."]], seed=5)
    assert len(many) == 2 and all(len(row) == 2 for row in many)
    with pytest.raises(ValueError, match="one prompt per agent"):
        team.generate(["only one"])
    assert "Team(task='length_ratio', agents=2" in repr(team)


def test_a_single_policy_team_answers_with_one_part(exported):
    from magrpo import Team  # the lazy top-level import

    team = Team.from_pretrained(exported("ppo"), device="cpu")
    assert team.num_agents == 1
    item = team.task.load("eval")[0]
    out = team.answer(item, seed=0)
    assert len(out.parts) == 1 and out.answer == out.parts[0].strip()
    assert len(team.generate(["Say hi."])) == 1


def test_the_coding_task_assembles_one_program_and_the_default_joins_the_parts():
    from magrpo.tasks import build_task

    cfg = compose_cfg(["task=humaneval"])
    task = build_task(cfg.task, cfg.reward)
    item = task.load("eval")[0]
    entry = item["entry_point"]
    helper = "```python\ndef aux(x):\n    return x + 1\n```"
    main = f"```python\ndef {entry}(*args):\n    return aux(1)\n```"
    program = task.assemble(item, [helper, main])
    assert "def aux(x):" in program and f"def {entry}(" in program
    assert program.index("def aux(") < program.index(f"def {entry}(")
    assert "```" not in program                     # code, not the agents' markdown
    if item.get("imports"):
        assert program.startswith(item["imports"].strip()[:20])
    compile(program, "<team>", "exec")
    assert "program" in task.assembly

    cfg = compose_cfg(["task=length_ratio"])
    plain = build_task(cfg.task, cfg.reward)
    assert plain.assemble({}, ["  one \n", "two"]) == "one\n\ntwo"


# -- 5. refusals: one line, exit 2 --------------------------------------------------------------------


def test_export_refuses_a_missing_run(tmp_path, capsys):
    code, out, err = _export([tmp_path / "nothing", tmp_path / "team"], capsys)
    assert code == 2 and "Traceback" not in err
    lines = _error_lines(err)
    assert len(lines) == 1 and lines[0].startswith("magrpo-export: error: ") and "no such" in lines[0]
    assert not (tmp_path / "team").exists()


def test_export_refuses_a_run_with_no_complete_checkpoint(trained, tmp_path, capsys):
    unfinished = tmp_path / "unfinished"
    shutil.copytree(trained("separate"), unfinished)
    (unfinished / "checkpoints" / "step_2" / "manifest.json").unlink()   # as a save cut short leaves it
    code, _, err = _export([unfinished, tmp_path / "team"], capsys)
    lines = _error_lines(err)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("magrpo-export: error: "), err
    assert "Traceback" not in err and not (tmp_path / "team").exists()


def test_export_refuses_a_run_trained_without_a_final_checkpoint(tmp_path, capsys):
    run = _train([*RUNS["separate"], "save_final=false"], tmp_path)
    code, _, err = _export([run, tmp_path / "team"], capsys)
    lines = _error_lines(err)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("magrpo-export: error: "), err
    assert not (tmp_path / "team").exists()


def test_export_refuses_a_step_it_does_not_have_and_lists_the_ones_it_has(trained, tmp_path, capsys):
    code, _, err = _export([trained("separate"), tmp_path / "team", "--step", "7"], capsys)
    lines = _error_lines(err)
    assert code == 2 and len(lines) == 1, err
    assert "step_7" in lines[0] and "its checkpoints: 2" in lines[0]
    assert not (tmp_path / "team").exists()
    # the step it has is exported
    code, out, _ = _export([trained("separate"), tmp_path / "team", "--step", "2"], capsys)
    assert code == 0 and _json(tmp_path / "team" / "team.json")["source"]["step"] == 2


def test_export_refuses_a_non_empty_out_dir_without_force(trained, tmp_path, capsys):
    out = tmp_path / "team"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    code, _, err = _export([trained("separate"), out], capsys)
    lines = _error_lines(err)
    assert code == 2 and len(lines) == 1 and "not an exported team" in lines[0], err
    # --force replaces an earlier export only, never someone's files
    code, _, err = _export([trained("separate"), out, "--force"], capsys)
    assert code == 2 and "not an exported team" in err and [p.name for p in out.iterdir()] == ["mine.txt"]
    (out / "mine.txt").unlink()
    assert _export([trained("separate"), out], capsys)[0] == 0
    code, _, err = _export([trained("separate"), out], capsys)
    assert code == 2 and "--force" in _error_lines(err)[0], err
    code, _, _ = _export([trained("separate"), out, "--force"], capsys)
    assert code == 0 and (out / "team.json").is_file()
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "team"]
    assert leftovers == [], "no temporary or old directory is left next to OUT_DIR"
    # an empty directory is fine without --force
    (tmp_path / "empty").mkdir()
    assert _export([trained("separate"), tmp_path / "empty"], capsys)[0] == 0


def test_export_never_writes_into_a_run_or_a_team(trained, exported, tmp_path, capsys):
    run, other, team = trained("separate"), trained("ppo"), exported("separate")
    before = {d: tree_digest(d) for d in (run, other, team)}
    cases = [
        ([run / "checkpoints" / "step_2", run / "team"], run),       # a checkpoint path counts as its run
        ([run / "checkpoints" / "step_2", run / "checkpoints" / "team"], run),
        ([run, run / "exports" / "team"], run),
        ([run, other / "team"], other),                                # any run, not only the source
        ([run, team / "nested"], team),                                # nor an exported team
    ]
    for argv, inside in cases:
        code, _, err = _export([*argv, "--force"], capsys)
        lines = _error_lines(err)
        assert code == 2 and len(lines) == 1 and lines[0].startswith("magrpo-export: error: OUT_DIR "), (argv, err)
        assert f"inside the {'exported team' if inside == team else 'run directory'} {str(inside)!r}" in lines[0]
    assert {d: tree_digest(d) for d in (run, other, team)} == before, "a refused export changed nothing"


def test_export_refuses_a_checkpoint_path_that_does_not_exist_listing_the_runs(trained, tmp_path, capsys):
    run = trained("separate")
    code, _, err = _export([run / "checkpoints" / "step_9", tmp_path / "team"], capsys)
    lines = _error_lines(err)
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "step_9" in lines[0] and f"no such checkpoint; the run {run} has step_2" in lines[0]
    assert not (tmp_path / "team").exists()


def test_export_refuses_a_team_as_its_run(exported, tmp_path, capsys):
    code, _, err = _export([exported("separate"), tmp_path / "team"], capsys)
    lines = _error_lines(err)
    assert code == 2 and len(lines) == 1 and "exported team" in lines[0], err


def _eval_refusal(args: list[str], tmp_path: Path, capsys) -> str:
    code, err = _eval(args, tmp_path / "eval", capsys)
    lines = _error_lines(err)
    assert code == 2 and len(lines) == 1 and lines[0].startswith("magrpo-eval: config error: "), err
    assert "Traceback" not in err
    assert not (tmp_path / "eval" / "eval.json").exists()
    return lines[0]


def test_eval_refuses_a_damaged_team(exported, tmp_path, capsys):
    damaged = tmp_path / "damaged"
    shutil.copytree(exported("separate"), damaged)
    f = damaged / "agent_2" / "tokenizer_config.json"
    text = f.read_text()
    f.write_text(text.replace('"', "'", 1))          # same size, other content
    assert len(f.read_text()) == len(text)
    line = _eval_refusal([f"team={damaged}"], tmp_path, capsys)
    assert "agent_2/tokenizer_config.json" in line and "sha256" in line
    from magrpo.core.schema import ConfigError
    from magrpo.team.team import Team

    with pytest.raises(ConfigError, match="sha256"):
        Team.from_pretrained(damaged)


def _extra_adapter_weights(team: Path) -> Path:
    """A weight file beside agent_1's adapter, its values all 7 (what a sender adds)."""
    from safetensors.torch import load_file, save_file

    listed = team / "agent_1" / "adapter_model.safetensors"
    extra = team / "agent_1" / "zz_extra.safetensors"
    save_file({k: torch.full_like(v, 7.0) for k, v in load_file(str(listed)).items()}, str(extra))
    return extra


@pytest.mark.parametrize("listed", [False, True])
def test_a_lora_teams_extra_weight_file_is_refused_not_loaded(exported, tmp_path, capsys, listed):
    """As a full-model team's: an unlisted file in the adapter's folder is refused by the manifest
    check, and one a sender listed (the manifest rewritten) by the loader, which reads only the
    adapter's own file. Before, either one's values reached the adapter."""
    from magrpo.core.checkpoint import CheckpointError
    from magrpo.team.team import Team
    from tests.test_artifact_safety import rehash

    team = Path(shutil.copytree(exported("lora"), tmp_path / "team"))
    assert _json(team / "team.json")["weights"] == "adapters"
    extra = _extra_adapter_weights(team)
    if listed:
        rehash(team)
    with pytest.raises(CheckpointError) as info:
        Team.from_pretrained(team, device="cpu")
    msg = str(info.value)
    if listed:
        assert msg == (f"{extra.parent}: refused weights: zz_extra.safetensors is not a file that agent_1's weights "
                       f"are saved in (a LoRA adapter's adapter_model.safetensors); remove it, or save the weights "
                       f"again")
    else:
        assert msg == (f"{team}: refused team: agent_1/zz_extra.safetensors is not listed in its manifest.json "
                       f"(a team is its manifest; remove the file or export the team again)")
    line = _eval_refusal([f"team={team}"], tmp_path, capsys)
    assert "zz_extra.safetensors" in line
    extra.unlink()
    if listed:
        rehash(team)
    loaded = Team.from_pretrained(team, device="cpu")          # without it, the team loads
    lora = [v for k, v in loaded.agents[0].model.state_dict().items() if "lora_" in k]
    assert lora and not any(bool((v == 7).all()) for v in lora)


def test_eval_refuses_a_directory_that_is_not_a_team(trained, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert "not an exported team" in _eval_refusal([f"team={tmp_path / 'empty'}"], tmp_path, capsys)
    assert "not an exported team" in _eval_refusal([f"team={trained('separate')}"], tmp_path, capsys)


def test_eval_refuses_a_team_given_as_checkpoint(exported, tmp_path, capsys):
    line = _eval_refusal([f"checkpoint={exported('separate')}"], tmp_path, capsys)
    assert "exported team" in line and "team=" in line


def test_eval_refuses_both_checkpoint_and_team(trained, exported, tmp_path, capsys):
    line = _eval_refusal([f"checkpoint={trained('separate')}", f"team={exported('separate')}"], tmp_path, capsys)
    assert "give one" in line


def test_eval_refuses_a_team_with_other_agents_settings(exported, tmp_path, capsys):
    line = _eval_refusal([f"team={exported('separate')}", "agents.share_policy=true"], tmp_path, capsys)
    assert "other agents settings" in line and "share_policy" in line
    # a sampling key of the team is the evaluation's to change
    code, _ = _eval([f"team={exported('separate')}", "algo.max_new_tokens=4"], tmp_path / "ok")
    assert code == 0 and _json(tmp_path / "ok" / "eval.json")["config"]["algo"]["max_new_tokens"] == 4


# -- 6. atomicity ---------------------------------------------------------------------------------------


def test_a_failed_export_leaves_nothing_at_out_dir(trained, tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("the model card failed")

    import magrpo.team.team

    monkeypatch.setattr(magrpo.team.format, "model_card", broken)
    out = tmp_path / "exports" / "team"
    with pytest.raises(RuntimeError, match="model card"):
        export.export_run(trained("lora"), out)     # the weights and the base were written by then
    assert not out.exists()
    assert list((tmp_path / "exports").iterdir()) == [], "the temporary directory is removed too"


def _full_disk_line(err: str, where: Path, what: str) -> str:
    lines = _error_lines(err)
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"magrpo-export: setup error: the disk is full at {where}: writing {what} failed ("), err
    assert "free there" in lines[0] and "write elsewhere" in lines[0]
    return lines[0]


@pytest.mark.parametrize("form", ["safetensors", "oserror"])
def test_a_full_disk_stops_an_export_in_one_line_and_leaves_nothing(form, trained, tmp_path, monkeypatch, capsys):
    import errno
    import os

    import transformers.modeling_utils
    from safetensors import SafetensorError

    def full(state_dict, filename, metadata=None):
        Path(filename).write_bytes(b"\0" * 64)       # what a write cut short leaves
        if form == "safetensors":
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)

    run = trained("separate")                  # trained first: its checkpoints are written as usual
    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full)     # save_pretrained's writer
    before = tree_digest(run)
    exports = tmp_path / "exports"
    exports.mkdir()
    (exports / "mine.txt").write_text("keep me")
    code, out, err = _export([run, exports / "team"], capsys)
    assert code == 1 and out == ""
    assert "(no space left on device; " in _full_disk_line(err, exports, "team")
    assert sorted(p.name for p in exports.iterdir()) == ["mine.txt"], "no team, no temporary directory"
    assert tree_digest(run) == before


def test_a_really_full_disk_stops_an_export_in_one_line_and_leaves_nothing(trained, tmp_path, capsys):
    """On a 256 KiB tmpfs (the tiny team needs about 1 MiB): the libraries' own errors, end to end."""
    run = trained("separate")
    with small_tmpfs(tmp_path / "small", "256k") as disk:
        code, _, err = _export([run, disk / "team"], capsys)
        assert code == 1
        assert "(no space left on device; " in _full_disk_line(err, disk, "team")
        assert list(disk.iterdir()) == []
        from magrpo.core.schema import ConfigError
        from magrpo.team.team import Team

        with pytest.raises(ConfigError, match="no such directory"):
            Team.from_pretrained(disk / "team")


def test_a_killed_export_leaves_no_team_and_the_next_export_removes_its_temporary_directory(trained, tmp_path,
                                                                                            capsys):
    import signal
    import subprocess
    import sys

    from magrpo.core.schema import ConfigError
    from magrpo.team.checks import read_team
    from magrpo.team.team import Team

    run, out = trained("separate"), tmp_path / "exports" / "team"
    # SIGKILLed mid-export (the weights written, the model card next): nothing in-process can clean up
    script = ("import os, signal, sys\nimport magrpo.team.team\n"
              "magrpo.team.format.model_card = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)\n"
              f"from magrpo.cli import export\nsys.exit(export.main([{str(run)!r}, {str(out)!r}]))\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    (left,) = (tmp_path / "exports").iterdir()
    assert left.name.startswith(".team.") and left.name.endswith(".tmp") and not out.exists()
    assert (left / "agent_1" / "model.safetensors").is_file() and not (left / "manifest.json").exists()
    with pytest.raises(ConfigError, match="temporary directory of an export that did not finish"):
        Team.from_pretrained(left)
    code, _, err = _export([run, out], capsys)
    assert code == 0, err
    assert [p.name for p in (tmp_path / "exports").iterdir()] == ["team"], "the dead export's directory is gone"
    assert read_team(out)["source"]["step"] == 2


# -- 7. the hub ---------------------------------------------------------------------------------------


class FakeHub:
    """HfApi's create_repo/upload_folder against a local directory standing in for the remote."""

    def __init__(self, remote_root: Path):
        self.remote_root, self.calls = remote_root, []

    def create_repo(self, repo_id, repo_type, private, exist_ok):
        self.calls.append(("create_repo", repo_id, repo_type, private, exist_ok))
        (self.remote_root / repo_id).mkdir(parents=True, exist_ok=exist_ok)
        return f"https://hub.invalid/{repo_id}"

    def upload_folder(self, folder_path, repo_id, repo_type, commit_message):
        self.calls.append(("upload_folder", folder_path, repo_id, repo_type))
        shutil.copytree(folder_path, self.remote_root / repo_id, dirs_exist_ok=True)


def test_push_to_hub_uploads_the_whole_team_and_it_loads_back(trained, exported, tmp_path, monkeypatch):
    import huggingface_hub

    from magrpo.models.agents import policy_agents
    from magrpo.team.team import Team

    team_dir = exported("lora")
    api = FakeHub(tmp_path / "remote")
    url = export.push_to_hub(team_dir, "me/lora-team", private=True, api=api)
    assert url == "https://hub.invalid/me/lora-team"
    assert api.calls[0] == ("create_repo", "me/lora-team", "model", True, True)
    assert api.calls[1] == ("upload_folder", str(team_dir), "me/lora-team", "model")
    remote = tmp_path / "remote" / "me" / "lora-team"
    assert sorted(p.relative_to(remote) for p in remote.rglob("*")) == \
        sorted(p.relative_to(team_dir) for p in team_dir.rglob("*"))

    # a hub id resolves through snapshot_download (the network boundary) to its local copy
    asked = []

    def snapshot_download(repo_id, revision=None, **kwargs):
        asked.append((repo_id, revision))
        return str(tmp_path / "remote" / repo_id)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    team = Team.from_pretrained("me/lora-team", device="cpu")
    assert asked == [("me/lora-team", None)]
    assert team.source["team_dir"] == str(remote)
    original = Team.from_run(trained("lora"), device="cpu")
    for a, b in zip(policy_agents(original.agents), policy_agents(team.agents)):
        _assert_same_weights(a, b)
    item = team.task.load("eval")[0]
    assert team.answer(item, seed=1) == original.answer(item, seed=1)

    # magrpo-eval team=owner/name takes up the downloaded copy like a local team
    assert _eval(["team=me/lora-team"], tmp_path / "eval")[0] == 0
    report = _json(tmp_path / "eval" / "eval.json")
    assert report["team"] == str(remote) and report["task"] == "length_ratio"


def test_push_to_hub_refuses_a_directory_that_is_not_a_whole_team(exported, tmp_path):
    from magrpo.core.schema import ConfigError

    half = tmp_path / "half"
    shutil.copytree(exported("separate"), half)
    (half / "agent_1" / "model.safetensors").unlink()
    api = FakeHub(tmp_path / "remote")
    with pytest.raises(ConfigError, match="missing"):
        export.push_to_hub(half, "me/half", api=api)
    assert api.calls == [], "nothing goes up"


def test_a_failed_upload_exits_1_and_keeps_the_exported_team(trained, tmp_path, monkeypatch, capsys):
    import huggingface_hub

    class Unreachable:
        def create_repo(self, **kwargs):
            raise OSError("the hub is unreachable\nmore detail")

        def upload_folder(self, **kwargs):      # pragma: no cover - never reached
            raise AssertionError("uploaded after create_repo failed")

    monkeypatch.setattr(huggingface_hub, "HfApi", Unreachable)
    out = tmp_path / "team"
    code, stdout, err = _export([trained("separate"), out, "--push-to-hub", "me/team"], capsys)
    assert code == 1
    lines = _error_lines(err)
    assert len(lines) == 1 and "upload" in lines[0] and "me/team" in lines[0] and "unreachable" in lines[0], err
    assert f"wrote {out}" in stdout
    from magrpo.team.checks import read_team

    assert read_team(out)["task"] == "length_ratio"       # whole and verified


def test_a_hub_id_that_cannot_be_fetched_is_refused_in_one_line(monkeypatch):
    import huggingface_hub

    from magrpo.core.schema import ConfigError
    from magrpo.team.team import Team

    def snapshot_download(repo_id, revision=None, **kwargs):
        raise OSError("offline")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    with pytest.raises(ConfigError, match="me/absent") as e:
        Team.from_pretrained("me/absent")
    assert "\n" not in str(e.value).strip()
    with pytest.raises(ConfigError, match="no such directory"):
        Team.from_pretrained("./not/here")


# -- 8. output_dir= runs are taken up without their overrides ------------------------------------------


def test_an_output_dir_run_is_resumed_and_evaluated_without_its_overrides(tmp_path):
    run = _train(["task=tldr", *TINY], tmp_path / "first")
    assert (run / ".hydra" / "overrides.yaml").is_file()
    assert "task=tldr" in (run / ".hydra" / "overrides.yaml").read_text()

    assert _eval([f"checkpoint={run}"], tmp_path / "eval")[0] == 0
    summary = _json(tmp_path / "eval" / "summary.json")
    assert summary["config"]["task"] == "tldr" and summary["from_run"]["run_dir"] == str(run)
    assert _json(tmp_path / "eval" / "eval.json")["task"] == "tldr"

    resumed = tmp_path / "resumed"
    code = run_cli(train_main, "magrpo-train", [f"resume={run}", "max_steps=3", f"output_dir={resumed}",
                                                f"hydra.run.dir={tmp_path / 'resumed_hydra'}"])
    assert code == 0
    summary = _json(resumed / "summary.json")
    assert summary["status"] == "finished" and summary["steps"] == 3
    assert summary["config"]["task"] == "tldr" and summary["resumed_from"]["step"] == 2
    assert summary["from_run"]["inherited"]["task"] == "tldr"
    # the resumed run is itself a run to take up
    assert "task=tldr" in (resumed / ".hydra" / "overrides.yaml").read_text()


def test_eval_refuses_a_hub_team_it_cannot_fetch_in_one_line(tmp_path, monkeypatch, capsys):
    import huggingface_hub

    def snapshot_download(repo_id, revision=None, **kwargs):
        raise OSError("offline")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    line = _eval_refusal(["team=me/absent"], tmp_path, capsys)
    assert "me/absent" in line
