"""bf16 linear products widened to float32 on CPUs without a bf16 unit (magrpo/models/cpu_bf16.py)."""

import copy
import pickle

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from magrpo.models.cpu_bf16 import MIN_ROWS, Bf16Linear, use_float32_products

BF16 = torch.bfloat16


def _bf16_linear(weight, bias):
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None).to(BF16)
    with torch.no_grad():
        layer.weight.copy_(weight)
        if bias is not None:
            layer.bias.copy_(bias)
    use_float32_products(layer)
    return layer


def test_a_hand_computed_case():
    """y = x W^T + b, dx = dy W, dW = dy^T x, db = sum dy, worked out by hand (all exact in bf16)."""
    layer = _bf16_linear(torch.tensor([[1.0, 0.0], [0.5, 1.0]]), torch.tensor([1.0, -1.0]))
    assert type(layer) is Bf16Linear
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=BF16, requires_grad=True)
    y = layer(x)
    assert y.dtype == BF16
    assert y.tolist() == [[2.0, 1.5], [4.0, 4.5]]          # [1+0+1, 0.5+2-1], [3+0+1, 1.5+4-1]
    y.sum().backward()                                      # dy = ones
    assert x.grad.tolist() == [[1.5, 1.0], [1.5, 1.0]]      # rows of dy W: [1+0.5, 0+1]
    assert layer.weight.grad.tolist() == [[4.0, 6.0], [4.0, 6.0]]     # dy^T x: column sums of x
    assert layer.bias.grad.tolist() == [2.0, 2.0]
    assert layer.weight.grad.dtype == layer.bias.grad.dtype == x.grad.dtype == BF16


def test_products_are_the_float32_products_of_the_bf16_operands_rounded_once():
    torch.manual_seed(0)
    w, b = torch.randn(48, 40).to(BF16), torch.randn(48).to(BF16)
    layer = _bf16_linear(w, b)
    x = torch.randn(3, 50, 40).to(BF16).requires_grad_()
    dy = torch.randn(3, 50, 48).to(BF16)
    layer(x).backward(dy)
    # The same sums in float64 on the same bf16 values, rounded to bf16: within one bf16 rounding.
    x64, w64, dy64 = x.detach().double(), w.double(), dy.double()
    want = {"y": (x64 @ w64.T + b.double()), "dx": dy64 @ w64,
            "dW": dy64.reshape(-1, 48).T @ x64.reshape(-1, 40), "db": dy64.reshape(-1, 48).sum(0)}
    got = {"y": layer(x).double(), "dx": x.grad.double(), "dW": layer.weight.grad.double(),
           "db": layer.bias.grad.double()}
    for key in want:
        torch.testing.assert_close(got[key], want[key].to(BF16).double(), rtol=2 ** -7, atol=1e-2, msg=key)


def _fp32_pair(seed):
    """A float32 nn.Linear and a widened copy of it."""
    torch.manual_seed(seed)
    plain = nn.Linear(40, 48)
    widened = copy.deepcopy(plain)
    use_float32_products(widened)
    return plain, widened


def test_autocast_casts_like_autocast_and_keeps_float32_master_weights():
    plain, widened = _fp32_pair(1)
    x = torch.randn(64, 40)
    with torch.autocast("cpu", dtype=BF16):
        want, got = plain(x), widened(x)
    assert got.dtype == want.dtype == BF16
    torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -7, atol=1e-2)
    want.float().square().sum().backward()
    got.float().square().sum().backward()
    assert widened.weight.grad.dtype == torch.float32 and widened.bias.grad.dtype == torch.float32
    for a, b in ((widened.weight.grad, plain.weight.grad), (widened.bias.grad, plain.bias.grad)):
        assert (a - b).norm() / b.norm() < 0.02


def test_other_dtypes_and_few_rows_without_grad_run_torchs_own_product():
    fp32, widened = _fp32_pair(2)
    x = torch.randn(100, 40)
    assert torch.equal(widened(x), fp32(x))                 # float32: nn.Linear's forward, bit for bit
    layer = _bf16_linear(torch.randn(48, 40).to(BF16), None)
    few = torch.randn(MIN_ROWS - 1, 40).to(BF16)
    with torch.no_grad():                                   # a decoding step: torch's bf16 kernel
        assert torch.equal(layer(few), F.linear(few, layer.weight))


def test_a_lora_model_with_checkpointing_trains_the_same_and_saves_the_same_keys():
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    def build(widen):
        torch.manual_seed(3)
        config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        model = Qwen2ForCausalLM(config).to(BF16)
        model.activation_checkpointing_enable({"use_reentrant": False})
        model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False))
        if widen:
            assert use_float32_products(model) > 0
        model.train()
        ids = torch.randint(0, 64, (4, 40), generator=torch.Generator().manual_seed(0))
        model(input_ids=ids, labels=ids).loss.backward()
        return model, {n: p.grad.float() for n, p in model.named_parameters() if p.grad is not None}

    plain, want = build(False)
    widened, got = build(True)
    assert set(got) == set(want) and len(got) == 2 * 7 * 2      # LoRA A and B on 7 linears x 2 layers (peft leaves the head out)
    for name in want:
        assert (got[name] - want[name]).norm() <= 0.05 * want[name].norm() + 1e-6, name
    assert list(widened.state_dict()) == list(plain.state_dict())
    assert any(type(m) is Bf16Linear for m in copy.deepcopy(widened).modules())
    layer = pickle.loads(pickle.dumps(_bf16_linear(torch.ones(2, 2), None)))       # the class is importable
    assert type(layer) is Bf16Linear


@pytest.mark.parametrize("native", [False, True], ids=["plain-cpu", "bf16-cpu"])
@pytest.mark.parametrize("mode", ["auto", "native", "widen"])
def test_load_agents_widens_as_hardware_cpu_bf16_says(make_cfg, monkeypatch, native, mode):
    """auto widens only where the CPU lacks a bf16 unit; widen on any CPU; native on none. A CPU with
    a bf16 unit is simulated by the probe magrpo.models.cpu_bf16 asks (cpu_has_native_bf16)."""
    import magrpo.models.cpu_bf16
    from magrpo.models import agents as models
    from magrpo.validation.checks import validate

    monkeypatch.setattr(magrpo.models.cpu_bf16, "cpu_has_native_bf16", lambda: native)
    want = mode == "widen" or (mode == "auto" and not native)
    cfg = validate(make_cfg(["hardware.autocast=bf16", f"hardware.cpu_bf16={mode}"]))
    agents = models.load_agents(cfg.agents, cfg.hardware, 2, need_reference=True)
    linears = [m for a in agents for net in (a.model, a.reference) if net is not None
               for m in net.modules() if isinstance(m, nn.Linear)]
    assert linears and all((type(m) is Bf16Linear) is want for m in linears)
    cfg = validate(make_cfg([f"hardware.cpu_bf16={mode}"]))               # float32, no autocast
    agents = models.load_agents(cfg.agents, cfg.hardware, 1, need_reference=False)
    assert not any(type(m) is Bf16Linear for m in agents[0].model.modules())


def test_hardware_cpu_bf16_is_validated_naming_key_value_and_choices(make_cfg):
    from magrpo.core.schema import ConfigError
    from magrpo.validation.checks import validate

    with pytest.raises(ConfigError) as e:
        validate(make_cfg(["hardware.cpu_bf16=fast"]))
    assert str(e.value) == "hardware.cpu_bf16='fast' is not allowed; choose one of: auto, native, widen"
    assert validate(make_cfg([])).hardware.cpu_bf16 == "auto"
    for hardware in ("cpu", "gpu", "multi_gpu"):        # every hardware group states the default
        assert make_cfg([f"hardware={hardware}"]).hardware.cpu_bf16 == "auto"
