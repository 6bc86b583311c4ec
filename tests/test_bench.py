"""Smoke test of the benchmark contract (docs/benchmarks.md, "Speed per method"): scripts/bench.py trains on
length_ratio and ends its output with one JSON line holding the throughput, the time shares and
the peak memory."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "scripts" / "bench.py"


def _bench_here(argv: list[str], monkeypatch, capsys) -> dict:
    """The JSON line of scripts/bench.py's main run in this process (a fresh interpreter costs more
    than the benchmark; the two-turn test below runs the script as a process too, for its one-turn
    step). The script's environment defaults, sys.path and torch threads are put back."""
    for key, value in (("TOKENIZERS_PARALLELISM", "false"), ("WANDB_MODE", "disabled"),
                       ("OMP_WAIT_POLICY", "PASSIVE"), ("HF_HUB_OFFLINE", "1")):
        monkeypatch.setenv(key, os.environ.get(key, value))
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = importlib.util.spec_from_file_location("bench", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    threads = torch.get_num_threads()
    capsys.readouterr()
    try:
        bench.main(argv)
    finally:
        torch.set_num_threads(threads)
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])     # the JSON line ends the output


@pytest.mark.parametrize("algo", ["magrpo", "ippo"])
def test_bench_prints_one_json_line_with_the_contract_keys(algo, monkeypatch, capsys):
    result = _bench_here(["--model", "builtin:tiny", "--agents", "2", "--prompts", "4", "--batch", "2", "--gens", "2",
                          "--tokens", "4", "--threads", "1", "--algo", algo], monkeypatch, capsys)

    assert result["mode"] == "magrpo" and result["algo"] == algo
    for key in ("prompts_per_s", "tokens_per_s", "share_generate", "share_reward", "share_update",
                "peak_rss_mb", "seconds", "completion_tokens"):
        assert isinstance(result[key], (int, float)), key
    assert "peak_cuda_mb" not in result      # CPU run
    assert result["prompts_per_s"] > 0 and result["tokens_per_s"] > 0 and result["peak_rss_mb"] > 0
    shares = [result[f"share_{k}"] for k in ("generate", "reward", "update", "other")]
    assert all(0.0 <= s <= 1.0 for s in shares)
    assert abs(sum(shares) - 1.0) < 0.01
    assert result["share_generate"] > 0 and result["share_update"] > 0
    # 2 steps x 2 items x 2 samples x 2 agents, at most 4 tokens each (EOS may stop one early)
    assert 0 < result["completion_tokens"] <= 2 * 2 * 2 * 2 * 4
    # prompts/s is the prompts over the summed step time the algorithm reported
    assert abs(result["prompts_per_s"] - 4 / result["seconds"]) < 1e-3 * result["prompts_per_s"] + 1e-4
    assert result["prompts"] == 4 and result["batch"] == 2 and result["gens"] == 2 and result["max_new_tokens"] == 4


@pytest.mark.slow      # 10 s: a second process times the one-turn step; the fast suite runs the one-turn bench
def test_bench_turns_compares_a_two_turn_step_with_a_one_turn_step(monkeypatch, capsys):
    # The two-turn step runs here; the script times the one-turn step in a process of its own and
    # reads that process's last line: the command's JSON line contract, end to end.
    result = _bench_here(["--model", "builtin:tiny", "--agents", "2", "--prompts", "2", "--batch", "2", "--gens", "2",
                          "--tokens", "4", "--threads", "1", "--turns", "2"], monkeypatch, capsys)
    assert "one_turn_error" not in result, result.get("one_turn_error")
    assert result["turns"] == 2 and result["branches"] == 1 and result["feedback"] == "plain"
    # one node per sibling set expands: turn 2 holds as many joint actions as turn 1
    assert result["turn_stats"]["turn_1/nodes"] == result["turn_stats"]["turn_2/nodes"] == 4
    assert result["turn_stats"]["turn_2/prompt_tokens_mean"] > result["turn_stats"]["turn_1/prompt_tokens_mean"]
    assert result["one_turn_seconds"] > 0
    assert result["turns_over_one_turn"] == round(result["seconds"] / result["one_turn_seconds"], 3)


def test_bench_times_the_crowd_game_with_a_team_of_up_to_eight(monkeypatch, capsys):
    """--task crowd: the coordination game of up to 8 agents, here 3 of them under MAPPO's team critic."""
    result = _bench_here(["--task", "crowd", "--agents", "3", "--model", "builtin:tiny", "--prompts", "2", "--batch", "2",
                          "--gens", "2", "--tokens", "2", "--threads", "1", "--algo", "mappo",
                          "--override", "algo.critic_view=joint", "--override", "algo.critic=model"], monkeypatch, capsys)
    assert result["algo"] == "mappo" and result["agents"] == 3 and result["prompts_per_s"] > 0
    # 1 step x 2 items x 2 samples x 3 agents, at most 2 tokens each
    assert 0 < result["completion_tokens"] <= 2 * 2 * 3 * 2
    bench = _bench_module()
    with pytest.raises(SystemExit):
        bench.parse_args(["--task", "crowd", "--agents", "9"])
    with pytest.raises(SystemExit):
        bench.parse_args(["--agents", "3"])         # length_ratio is a game of two


def _bench_module():
    spec = importlib.util.spec_from_file_location("bench_mod", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_update_flops_count_six_times_the_matmul_parameters_per_token(make_cfg):
    """builtin:tiny by hand: per layer q 64x64+64, k and v 64x32+32 each, o 64x64, MLP 3 x 64x128,
    two norms of 64 = 37120; two layers, a final norm of 64, and the 512 x 64 table, which counts
    once as the tied output head's product. Untied, the table is a lookup and the head counts."""
    from types import SimpleNamespace

    from transformers import AutoModelForCausalLM, Qwen2ForCausalLM

    from magrpo.models.agents import load_agents
    from magrpo.models.tiny import build_builtin
    from magrpo.tasks import build_task
    from magrpo.validation.checks import validate

    bench = _bench_module()
    per_layer = (64 * 64 + 64) + 2 * (64 * 32 + 32) + 64 * 64 + 3 * 64 * 128 + 2 * 64
    n = 2 * per_layer + 64 + 512 * 64
    tied = AutoModelForCausalLM.from_pretrained(str(build_builtin("tiny")))
    assert bench.matmul_params(tied) == n == 107072
    config = tied.config
    config.tie_word_embeddings = False
    untied = Qwen2ForCausalLM(config)
    assert sum(p.numel() for p in untied.parameters()) == n + 512 * 64
    assert bench.matmul_params(untied) == n

    cfg = validate(make_cfg(["agents.models.0.dtype=float32"]))
    agents = load_agents(cfg.agents, cfg.hardware, 2, need_reference=False)
    task = build_task(cfg.task, cfg.reward)
    items = task.load("train")[:3]
    prompt_tokens = sum(len(agents[i].tokenizer(agents[i].format_prompt(p), add_special_tokens=False).input_ids)
                        for item in items for i, p in enumerate(task.prompts(item, 2)))
    args = SimpleNamespace(agents=2, gens=4)
    got = bench.update_flops(args, cfg, agents, task, items, completion_tokens=100)
    assert got == 6 * n * (4 * prompt_tokens + 100)
    lora = validate(make_cfg(["agents=tiny_lora"]))
    assert bench.update_flops(args, lora, load_agents(lora.agents, lora.hardware, 2, need_reference=False),
                              task, items, 100) is None     # 6N overstates a LoRA backward


def test_decode_bench_times_every_decode_step_and_checks_their_tokens(monkeypatch, capsys):
    # scripts/decode_bench.py is the GPU check of algo.decode_step; on the CPU it must run too.
    monkeypatch.setattr(sys, "path", list(sys.path))
    spec = importlib.util.spec_from_file_location("decode_bench", ROOT / "scripts" / "decode_bench.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    threads = torch.get_num_threads()
    capsys.readouterr()
    try:
        rc = mod.main(["--model", "tiny", "--tokens", "6", "--prompts", "3", "--gens", "2", "--repeats", "1",
                       "--prompt-length", "12", "--lora", "4", "--threads", "1"])
    finally:
        torch.set_num_threads(threads)
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rc == 0 and out["lean_step_serves"] and out["rows"] == 6
    assert set(out["ms_per_token"]) == {"lean", "static", "graph"}
    assert all(v > 0 for v in out["ms_per_token"].values())
    assert out["greedy_tokens_equal_lean"] == {"lean": True, "static": True, "graph": True}
    with pytest.raises(SystemExit):
        mod.parse_args(["--steps", "lean,warp"])
