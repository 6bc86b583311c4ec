"""magrpo-crossplay: agents paired across runs, on the coordination suite's tiny games."""

from __future__ import annotations

import csv
import json
import math
import os
from collections import Counter
from pathlib import Path

import pytest

from magrpo.cli.crossplay import Pairing, _pm, host_partner_matrix, labels_of, main, pairings
from magrpo.core.schema import ConfigError
from tests.conftest import compose_cfg, tree_digest


def _train(out: Path, overrides: list[str]) -> Path:
    from magrpo.cli.train import run

    run(compose_cfg([f"output_dir={out}", *overrides]))
    return out


@pytest.fixture(scope="module")
def cover_seeds(tmp_path_factory) -> list[Path]:
    """Two seeds of MAGRPO on `cover` (the recipe, 100 updates, ~20 s each): the team learns which
    agent takes which needed part, a convention each seed settles on its own."""
    root = tmp_path_factory.mktemp("cover")
    return [_train(root / f"s{s}", ["recipe=cover", "method=magrpo", f"seed={s}", "max_steps=100",
                                    "eval.every=0", "eval.num_items=8", "eval.num_samples=1"])
            for s in (0, 1)]


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("smoke")
    runs = {"agree_a": ["task=agree"], "agree_b": ["task=agree", "seed=1"], "cover": ["task=cover"],
            "agree3_a": ["task=agree", "agents.num_agents=3"], "agree3_b": ["task=agree", "agents.num_agents=3", "seed=1"],
            "grpo": ["task=agree", "algo=grpo"]}
    return {name: _train(root / name, ["debug=smoke", *o]) for name, o in runs.items()}


def _convention(run: Path) -> tuple[str, ...]:
    """Each agent's most frequent part in its own team's answers, read through the Team API (not
    through cross-play): what the run learned."""
    from magrpo.tasks.coordination import LABELS, pick
    from magrpo.team.team import Team

    team = Team.from_run(run)
    answers = team.answer_batch(team.task.load("eval")[:8], seed=3)
    labels = LABELS[:team.task.cfg.num_options]
    return tuple(Counter(pick(a.parts[k], labels) for a in answers).most_common(1)[0][0]
                 for k in range(team.num_agents))


@pytest.mark.slow      # a learning check: two seeds of 100 updates must each solve cover first
def test_crossplay_reports_the_gap_of_two_seeds_conventions(cover_seeds, tmp_path, capsys):
    out = tmp_path / "cp"
    assert main([*map(str, cover_seeds), "--out", str(out), "--labels", "s0,s1"]) == 0
    printed = capsys.readouterr().out
    assert "self-play" in printed and "gap" in printed
    rows = list(csv.DictReader(open(out / "crossplay.csv")))
    assert [(r["agent_1"], r["agent_2"]) for r in rows] == [("s0", "s0"), ("s1", "s1"), ("s0", "s1"), ("s1", "s0")]
    cell = {(r["agent_1"], r["agent_2"]): float(r["mean"]) for r in rows}
    assert {r["metric"] for r in rows} == {"normalized_return"}
    # Each seed solved its game.
    assert cell[("s0", "s0")] >= 0.9 and cell[("s1", "s1")] >= 0.9
    # What a mixed team scores follows from the two conventions: two agents on different needed
    # parts cover both (1.0); on the same part, half (0.5).
    conv = {name: _convention(run) for name, run in zip(("s0", "s1"), cover_seeds)}
    for a, b in (("s0", "s1"), ("s1", "s0")):
        parts = {conv[a][0], conv[b][1]}
        expected = 1.0 if parts == {"b", "d"} else 0.5 if len(parts) == 1 else None
        if expected is not None:
            assert cell[(a, b)] == pytest.approx(expected, abs=0.15), (a, b, conv)
    report = json.loads((out / "crossplay.json").read_text())
    diag = (cell[("s0", "s0")] + cell[("s1", "s1")]) / 2
    cross = (cell[("s0", "s1")] + cell[("s1", "s0")]) / 2
    assert report["self_play"] == pytest.approx(diag, abs=1e-6)
    assert report["cross_play"] == pytest.approx(cross, abs=1e-6)
    assert report["gap"] == pytest.approx(diag - cross, abs=1e-6)
    if conv["s0"] != conv["s1"]:      # the seeds settled on different conventions: cross-play breaks
        assert report["gap"] >= 0.3
    md = (out / "crossplay.md").read_text()
    assert "| agent 1 \\ agent 2 | s0 | s1 |" in md and f"gap (self-play - cross-play): {report['gap']:.3f}" in md
    assert (out / "crossplay.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_three_agents_play_one_swap_pairings(smoke_runs, tmp_path):
    out = tmp_path / "cp3"
    a, b = smoke_runs["agree3_a"], smoke_runs["agree3_b"]
    assert main([str(a), str(b), "--out", str(out), "--num-items", "2"]) == 0
    rows = list(csv.DictReader(open(out / "crossplay.csv")))
    assert len(rows) == 2 + 2 * 1 * 3          # R self-plays + R (R - 1) N single swaps
    assert sum(int(r["self_play"]) for r in rows) == 2
    report = json.loads((out / "crossplay.json").read_text())
    assert len(report["matrix"]) == 2 and all(len(row) == 2 for row in report["matrix"])


def test_pairings_and_host_partner_matrix_by_hand():
    assert [p.slots for p in pairings(2, 2, "one_swap")] == [(0, 0), (1, 1), (0, 1), (1, 0)]
    three = [p.slots for p in pairings(2, 3, "one_swap")]
    assert three[:2] == [(0, 0, 0), (1, 1, 1)]
    assert set(three[2:]) == {(1, 0, 0), (0, 1, 0), (0, 0, 1), (0, 1, 1), (1, 0, 1), (1, 1, 0)}
    assert len(pairings(2, 3, "all")) == 8
    # Host 0 with one agent of source 1 scores 0.2, 0.4, 0.6 by slot: the host-partner cell is their mean.
    res = [(Pairing((0, 0, 0)), {"mean": 1.0}), (Pairing((1, 1, 1)), {"mean": 0.8}),
           (Pairing((1, 0, 0)), {"mean": 0.2}), (Pairing((0, 1, 0)), {"mean": 0.4}), (Pairing((0, 0, 1)), {"mean": 0.6}),
           (Pairing((0, 1, 1)), {"mean": 0.0}), (Pairing((1, 0, 1)), {"mean": 0.3}), (Pairing((1, 1, 0)), {"mean": 0.3})]
    m = host_partner_matrix(res, 2, 3)
    assert m[0] == [pytest.approx(1.0), pytest.approx(0.4)]
    assert m[1] == [pytest.approx(0.2), pytest.approx(0.8)]
    two = host_partner_matrix([(Pairing((0, 1)), {"mean": 0.5})], 2, 2)
    assert two[0][1] == 0.5 and math.isnan(two[1][0])


def test_labels():
    assert labels_of(["runs/a", "runs/b"], None) == ["a", "b"]
    assert labels_of(["x/run", "y/run"], None) == ["x/run", "y/run"]
    with pytest.raises(ConfigError, match="gives 1 label"):
        labels_of(["a", "b"], "only")


@pytest.mark.parametrize("case,why", [
    ("tasks", "differ in task 'agree' vs 'cover'"),
    ("sizes", "has 3 agent(s) but"),
    ("single", "single-model team"),
    ("missing", "no such run"),
    ("one", "at least 2 sources"),
    ("unfinished", "no complete checkpoint"),
])
def test_refusals_are_one_line(case, why, smoke_runs, tmp_path, capsys):
    s = {k: str(v) for k, v in smoke_runs.items()}
    unfinished = tmp_path / "unfinished"
    (unfinished / "checkpoints" / "step_1").mkdir(parents=True)    # a save that never completed
    sources = {"tasks": [s["agree_a"], s["cover"]], "sizes": [s["agree_a"], s["agree3_a"]],
               "single": [s["grpo"], s["agree_a"]], "missing": [s["agree_a"], str(tmp_path / "nope")],
               "one": [s["agree_a"]], "unfinished": [s["agree_a"], str(unfinished)]}[case]
    code = main([*sources, "--out", str(tmp_path / "cp")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and why in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "cp" / "crossplay.csv").exists()


def test_an_exported_team_plays_like_its_run(smoke_runs, tmp_path):
    """An exported team is a source as its run is: same pairings, same numbers."""
    from magrpo.cli.export import export_run

    team = export_run(smoke_runs["agree_b"], tmp_path / "team_b")
    a = tmp_path / "a"
    b = tmp_path / "b"
    assert main([str(smoke_runs["agree_a"]), str(smoke_runs["agree_b"]), "--out", str(a), "--num-items", "4",
                 "--labels", "x,y"]) == 0
    assert main([str(smoke_runs["agree_a"]), str(team), "--out", str(b), "--num-items", "4", "--labels", "x,y"]) == 0
    ra, rb = (list(csv.DictReader(open(d / "crossplay.csv"))) for d in (a, b))
    assert [(r["mean"], r["std"]) for r in ra] == [(r["mean"], r["std"]) for r in rb]


def _one_error_line(code: int, capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip() and not line.startswith("[")]
    assert code == 2 and len(err) == 1 and err[0].startswith("magrpo-crossplay: error: "), err
    return err[0]


def test_crossplay_never_writes_into_a_run(smoke_runs, tmp_path, capsys):
    a, b, other = smoke_runs["agree_a"], smoke_runs["agree_b"], smoke_runs["cover"]
    before = {d: tree_digest(d) for d in (a, b, other)}
    for out, inside in [(a / "crossplay", a), (b / "checkpoints" / "step_2" / "cp", b), (other / "cp", other)]:
        line = _one_error_line(main([str(a), str(b / "checkpoints" / "step_2"), "--out", str(out), "--force"]),
                               capsys)
        assert f"--out {str(out)!r} is inside the run directory {str(inside)!r}" in line
    assert {d: tree_digest(d) for d in (a, b, other)} == before


def test_crossplay_refuses_a_checkpoint_path_that_does_not_exist_listing_the_runs(smoke_runs, tmp_path, capsys):
    a, b = smoke_runs["agree_a"], smoke_runs["agree_b"]
    line = _one_error_line(main([str(a), str(b / "checkpoints" / "step_9"), "--out", str(tmp_path / "cp")]), capsys)
    assert f"{b / 'checkpoints' / 'step_9'}: no such checkpoint; the run {b} has step_2" in line
    assert not (tmp_path / "cp").exists()


def test_an_out_holding_a_file_crossplay_writes_is_refused_unless_force(smoke_runs, tmp_path, capsys):
    a, b = str(smoke_runs["agree_a"]), str(smoke_runs["agree_b"])
    out = tmp_path / "cp"
    out.mkdir()
    (out / "crossplay.md").write_text("my own notes on cross-play\n")
    (out / "mine.txt").write_text("keep me\n")
    before = tree_digest(out)
    line = _one_error_line(main([a, b, "--out", str(out), "--num-items", "2"]), capsys)
    assert "already holds crossplay.md" in line and "--force" in line
    assert tree_digest(out) == before
    assert main([a, b, "--out", str(out), "--num-items", "2", "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["crossplay.csv", "crossplay.json", "crossplay.md",
                                                     "crossplay.png", "mine.txt"]
    assert (out / "mine.txt").read_text() == "keep me\n"
    assert "Cross-play" in (out / "crossplay.md").read_text()
    from magrpo.cli.crossplay import build_parser

    assert "--force" in build_parser().format_help()


def test_a_source_paired_with_itself_is_refused_whatever_the_paths_and_labels(smoke_runs, tmp_path, capsys):
    from magrpo.cli.export import export_run

    a, b = smoke_runs["agree_a"], smoke_runs["agree_b"]
    link = tmp_path / "link"
    link.symlink_to(a, target_is_directory=True)
    team = export_run(a, tmp_path / "team_a")          # the same weights, written elsewhere
    before = tree_digest(a)
    capsys.readouterr()
    same_path = [(a, a), (a, a / "checkpoints" / "step_2"), (link, a / "checkpoints" / "step_2"),
                 (a / "checkpoints" / ".." / "checkpoints" / "step_2", link / "checkpoints" / "step_2")]
    for x, y in same_path:
        line = _one_error_line(main([str(x), str(y), "--labels", "p,q", "--out", str(tmp_path / "cp")]), capsys)
        ckpt = (a / "checkpoints" / "step_2").resolve()
        assert f"the sources {str(x)!r} and {str(y)!r} are one checkpoint ({ckpt})" in line
    line = _one_error_line(main([str(b), str(a), str(team), "--labels", "p,q,r", "--out", str(tmp_path / "cp")]),
                           capsys)
    assert f"the sources {str(a)!r} and {str(team)!r} hold the same weights" in line
    # without labels, a repeated source is named as such (not as a repeated label)
    line = _one_error_line(main([str(a), str(a), "--out", str(tmp_path / "cp")]), capsys)
    assert "are one checkpoint" in line
    assert not (tmp_path / "cp").exists() and tree_digest(a) == before


def test_zsc_summary_by_hand():
    """Self-play, cross-play and held-out scores, each with the 95% interval over the sources."""
    from magrpo.cli.crossplay import held_out_pairings, summarize
    from magrpo.table.stats import t_quantile_975

    # 2 sources, 2 agents: diagonal 1.0 and 0.8, off-diagonal 0.2 and 0.4; one partner (index 2).
    values = {(0, 0): 1.0, (1, 1): 0.8, (0, 1): 0.2, (1, 0): 0.4, (2, 0): 0.6, (0, 2): 0.7, (2, 1): 0.5, (1, 2): 0.3}
    plan = pairings(2, 2, "one_swap") + held_out_pairings(2, 1, 2)
    assert [p.slots for p in plan if p.held_out] == [(2, 0), (0, 2), (2, 1), (1, 2)]
    s = summarize([(p, {"mean": values[p.slots]}) for p in plan], 2)
    assert s["self_play"] == pytest.approx(0.9) and s["cross_play"] == pytest.approx(0.3)
    assert s["gap"] == pytest.approx(0.6)
    t = t_quantile_975(1)
    # per source: self 1.0 / 0.8; cross (both pairings include both sources) 0.3 / 0.3; held-out 0.65 / 0.4
    assert s["self_play_ci95"] == pytest.approx(t * math.sqrt(0.02) / math.sqrt(2))
    # both per-source cross-play means are the same two pairings: their spread is 0 by construction, not an
    # interval; it is n/a, with the reason, and never 0.000
    assert s["cross_play_ci95"] is None and s["cross_play_ci95_na"].startswith("2 sources: ")
    assert "self_play_ci95_na" not in s and "held_out_ci95_na" not in s
    assert s["held_out"] == pytest.approx(0.525)
    assert s["held_out_ci95"] == pytest.approx(t * math.sqrt(0.03125) / math.sqrt(2))
    assert _pm(s["cross_play"], s["cross_play_ci95"], s["cross_play_ci95_na"]) == \
        "0.300 ± n/a (2 sources: each source's cross-play is the mean of the same pairings, so they cannot " \
        "differ; 3 or more sources give an interval)"
    # three sources: each source's cross-play is a different set of pairings, so an interval
    three = {(i, j): 1.0 if i == j else 0.1 * (i + 2 * j) for i in range(3) for j in range(3)}
    s3 = summarize([(p, {"mean": three[p.slots]}) for p in pairings(3, 2, "one_swap")], 3)
    assert s3["cross_play_ci95"] > 0 and "cross_play_ci95_na" not in s3


def test_held_out_partners_play_with_every_source(smoke_runs, tmp_path, capsys):
    out = tmp_path / "zsc"
    args = [str(smoke_runs["agree_a"]), str(smoke_runs["agree_b"]), "--partners", str(smoke_runs["agree3_a"])]
    assert main([*args, "--out", str(out)]) == 2          # a partner must play the same game with the same team
    assert "agent(s)" in capsys.readouterr().err
    partner = _train(tmp_path / "agree_c", ["debug=smoke", "task=agree", "seed=2"])
    assert main([str(smoke_runs["agree_a"]), str(smoke_runs["agree_b"]), "--partners", str(partner),
                 "--out", str(out)]) == 0
    res = json.loads((out / "crossplay.json").read_text())
    held = [p for p in res["pairings"] if p["held_out"]]
    assert len(held) == 4 and all("partner:agree_c" in p["slots"] for p in held)
    assert res["held_out"] == pytest.approx(sum(p["mean"] for p in held) / 4)
    assert res["partners"] == [str(partner)] and res["held_out_ci95"] is not None
    assert res["cross_play_ci95"] is None and res["cross_play_ci95_na"].startswith("2 sources")
    md = (out / "crossplay.md").read_text()
    assert "held-out partner mean" in md and "Held-out partners: partner:agree_c" in md
    rows = list(csv.DictReader(open(out / "crossplay.csv")))
    assert sum(r["held_out"] == "1" for r in rows) == 4
    # a partner that is one of the sources is no held-out partner
    assert main([str(smoke_runs["agree_a"]), str(partner), "--partners", str(partner), "--out",
                 str(tmp_path / "x")]) == 2


# -- zero-shot coordination in the paper's table: magrpo-paper --crossplay, magrpo-table -------------


@pytest.fixture(scope="module")
def paper_root(tmp_path_factory) -> Path:
    """A coordination table's sweep directory as magrpo-paper leaves it: agree, the magrpo row's
    seeds 0 and 1 and the ippo row's seed 0 (smoke runs), under train/."""
    root = tmp_path_factory.mktemp("paper")
    for n, (row, seed) in enumerate((("magrpo", 0), ("magrpo", 1), ("ippo", 0))):
        _train(root / "train" / f"{n}_agree_{row}_s{seed}",
               ["debug=smoke", "task=agree", f"algo={row}", f"label={row}", f"seed={seed}"])
    return root


def test_paper_crossplay_pairs_each_rows_seeds_and_the_table_shows_it(paper_root, capsys):
    from magrpo.cli import paper
    from magrpo.table import main as table_main

    argv = ["coordination", "--out", str(paper_root), "--tasks", "agree", "--rows", "magrpo,ippo",
            "--crossplay-partners", "ippo", "--record-crossplay"]
    assert paper.main(argv) == 1          # ippo has one seed: named, magrpo's still paired
    err = capsys.readouterr().err
    assert "crossplay agree/ippo: 1 finished seed(s)" in err
    res = json.loads((paper_root / "crossplay" / "agree_magrpo" / "crossplay.json").read_text())
    train = sorted((paper_root / "train").iterdir())
    assert res["sources"] == [str(train[0]), str(train[1])] and res["partners"] == [str(train[2])]
    assert paper.main(argv) == 1 and "agree/magrpo: already done" in capsys.readouterr().out

    out = paper_root / "table"
    assert table_main([str(paper_root), "--layout", "paper", "--out", str(out), "--no-plots"]) == 0
    md = (out / "table.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| method"))
    assert all(h in header for h in ("self-play", "cross-play", "ZSC gap (self - cross)", "held-out partner"))
    rows = {r["label"]: r for r in csv.DictReader(open(out / "table.csv"))}
    for key in ("self_play", "cross_play", "gap", "held_out"):
        assert float(rows["magrpo"][f"zsc/{key}_mean"]) == pytest.approx(res[key])
        ci = res.get(f"{key}_ci95")           # none for the gap
        assert rows["magrpo"][f"zsc/{key}_ci95"] == ("" if ci is None else repr(ci))
        assert rows["ippo"][f"zsc/{key}_mean"] == ""        # no cross-play of its own: an empty cell
    assert "magrpo-crossplay over the row's seeds" in md and "`zsc/" not in md   # a row without one is no gap
    # two seeds: cross-play's interval cannot be estimated; the cell says n/a and the note says why
    assert res["cross_play_ci95"] is None
    magrpo_row = next(line for line in md.splitlines() if line.startswith("| MAGRPO") or line.startswith("| magrpo"))
    cells = [c.strip() for c in magrpo_row.strip("|").split("|")]
    assert cells[header.strip("|").split("|").index(" cross-play ")] == f"{res['cross_play']:.3f} ± n/a"
    assert f"agree/magrpo, cross-play: ± n/a ({res['cross_play_ci95_na']})" in md
    cp_md = (paper_root / "crossplay" / "agree_magrpo" / "crossplay.md").read_text()
    assert f"- cross-play mean: {res['cross_play']:.3f} ± n/a (2 sources: " in cp_md


def test_the_table_takes_a_crossplay_json_only_for_runs_it_holds(paper_root, tmp_path, capsys):
    """A crossplay.json is data: its sources are matched against the table's runs, by the path
    relative to the file where it records one (a moved tree) or as recorded; anything else is named
    under the table and left out."""
    from magrpo.table import main as table_main
    from magrpo.table.runs import collect as collect_runs
    from magrpo.table.zsc import collect

    runs, _ = collect_runs([paper_root / "train"], None, False)
    magrpo = sorted((paper_root / "train").glob("*_magrpo_*"))
    found = tmp_path / "found"
    cases = {
        "moved": {"sources": ["/nowhere/a", "/nowhere/b"], "source_dirs": [str(Path("..") / p.relative_to(paper_root))
                                                                          for p in magrpo],
                  "self_play": 0.5, "self_play_ci95": 0.1, "cross_play": 0.25, "gap": 0.25},
        "stranger": {"sources": [str(tmp_path)], "self_play": 0.9},
        "mixed": {"sources": [str(p) for p in sorted((paper_root / "train").iterdir())[1:]], "self_play": 0.9},
        "broken": "{not json",
        "no_sources": {"self_play": 1.0},
    }
    for name, data in cases.items():
        d = (paper_root if name == "moved" else found) / f"cp_{name}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "crossplay.json").write_text(data if isinstance(data, str) else json.dumps(data))
    (found / "cp_fifo").mkdir()
    os.mkfifo(found / "cp_fifo" / "crossplay.json")          # a read would wait for a writer forever
    try:
        results, notes = collect([paper_root / "train", paper_root / "cp_moved", found], runs)
        assert set(results) == {("agree", "magrpo")}
        cell = results[("agree", "magrpo")].values
        assert (cell["zsc/self_play"].mean, cell["zsc/self_play"].ci95, cell["zsc/gap"].mean) == (0.5, 0.1, 0.25)
        assert "zsc/held_out" not in cell
        joined = "\n".join(notes)
        assert len(notes) == 5 and "is not a run of this table" in joined and "several rows" in joined
        assert "not a regular file" in joined
        assert "not JSON" in joined and "no list of sources" in joined
        out = tmp_path / "table"
        assert table_main([str(paper_root / "train"), str(paper_root / "cp_moved"), str(found), "--layout", "paper",
                           "--out", str(out), "--no-plots"]) == 0
        md = (out / "table.md").read_text()
        assert "Not in the table: `" in md and "| 0.500 ± 0.100 (n=2) |" not in md   # n=2 of 2 runs: no (n=)
        assert "0.500 ± 0.100" in md and "held-out partner" not in md.split("\n\n")[1]
    finally:
        import shutil

        shutil.rmtree(paper_root / "cp_moved")
