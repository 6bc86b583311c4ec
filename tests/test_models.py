"""Loading agents: local directories, chat templates, shared-base adapters and their resume."""

import json

import pytest

from magrpo.cli.train import run
from magrpo.models.agents import load_agents
from magrpo.models.tiny import build_builtin
from magrpo.validation.checks import validate

TEMPLATE = ("{% for m in messages %}<|user|>{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def test_local_model_dir_with_a_chat_template_formats_prompts_through_it(make_cfg, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = build_builtin("tiny")
    local = tmp_path / "chat-model"
    tok = AutoTokenizer.from_pretrained(src)
    tok.chat_template = TEMPLATE
    tok.save_pretrained(local)
    AutoModelForCausalLM.from_pretrained(src).save_pretrained(local)
    cfg = validate(make_cfg([f"agents.models.0.name_or_path={local}"]))
    agents = load_agents(cfg.agents, cfg.hardware, 2, need_reference=False)
    assert agents[0].format_prompt("hi") == "<|user|>hi\n<|assistant|>"
    plain = load_agents(validate(make_cfg()).agents, cfg.hardware, 1, need_reference=False)[0]
    assert plain.format_prompt("hi") == "hi"          # no template: the plain prompt


def test_shared_base_adapters_are_separate_and_resume_exactly(make_cfg, tmp_path):
    cfg = validate(make_cfg(["agents=tiny_lora"]))
    a1, a2 = load_agents(cfg.agents, cfg.hardware, 2, need_reference=False)
    assert a1.model is a2.model                          # one copy of the base weights
    p1, p2 = a1.trainable_parameters(), a2.trainable_parameters()
    assert p1 and p2 and not {id(p) for p in p1} & {id(p) for p in p2}

    common = ["agents=tiny_lora", "max_steps=4", "save_every=2", "eval.every=0", "algo.batch_size=2",
              "algo.max_new_tokens=8", "eval.num_items=2", "optimizer.lr=1e-2"]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    run(make_cfg(common, out=str(full)))
    run(make_cfg([*common, f"resume={full / 'checkpoints' / 'step_2'}"], out=str(resumed)))

    def rows(d):
        return {r["step"]: r for r in map(json.loads, (d / "metrics.jsonl").read_text().splitlines())
                if "train/reward_mean" in r}

    a, b = rows(full), rows(resumed)
    for step in (3, 4):
        for key in ("train/agent_1/loss", "train/agent_2/loss", "train/reward_mean"):
            assert a[step][key] == b[step][key], (step, key)


def test_bf16_on_a_cpu_is_widened_as_hardware_cpu_bf16_says(monkeypatch):
    """bf16 weights or bf16 autocast on a CPU get widened float32 products (magrpo.models.cpu_bf16) under
    hardware.cpu_bf16=auto where the CPU lacks AVX512-BF16/AMX, under widen on any CPU, under native
    never; fp32 without autocast and a GPU keep torch's own products whatever the setting."""
    import torch

    import magrpo.models.cpu_bf16
    from magrpo.models import agents as models

    bf16, fp32 = torch.nn.Linear(2, 2).to(torch.bfloat16), torch.nn.Linear(2, 2)
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    for native in (False, True):
        monkeypatch.setattr(magrpo.models.cpu_bf16, "cpu_has_native_bf16", lambda native=native: native)
        for mode, widens in (("auto", not native), ("widen", True), ("native", False)):
            assert models.widens_bf16(bf16, cpu, "none", mode) is widens, (native, mode)
            assert models.widens_bf16(fp32, cpu, "bf16", mode) is widens, (native, mode)
            assert not models.widens_bf16(fp32, cpu, "none", mode)
            assert not models.widens_bf16(bf16, gpu, "bf16", mode)
    with pytest.raises(ValueError, match=r"hardware\.cpu_bf16='fast'; choose one of auto, native, widen"):
        models.widens_bf16(bf16, cpu, "none", "fast")


@pytest.mark.parametrize("overrides", [["agents=tiny_lora"], ["agents=tiny_lora", "agents.share_base=false"]])
def test_lora_agents_load_without_a_deprecation_warning(make_cfg, overrides):
    import warnings

    cfg = validate(make_cfg(overrides))
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)      # peft's own use of a renamed transformers name
        agents = load_agents(cfg.agents, cfg.hardware, 2, need_reference=False)
    assert len(agents) == 2


def test_the_first_build_of_a_builtin_says_so_and_a_cached_one_is_silent(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MAGRPO_CACHE", str(tmp_path))
    with caplog.at_level("INFO", logger="magrpo.models.tiny"):
        out = build_builtin("tiny")
    messages = [r.getMessage() for r in caplog.records if r.name == "magrpo.models.tiny"]
    assert messages[0] == f"building builtin:tiny into {out} (first use; later runs load it from there)"
    assert messages[1].startswith("built builtin:tiny in ") and messages[1].endswith(" s")
    assert out.parent == tmp_path / "models" and (out / "config.json").exists()
    caplog.clear()
    with caplog.at_level("INFO", logger="magrpo.models.tiny"):
        assert build_builtin("tiny") == out
    assert not [r for r in caplog.records if r.name == "magrpo.models.tiny"]
