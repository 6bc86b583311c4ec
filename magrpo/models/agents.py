"""Agents: a causal LM, its tokenizer and its device, loaded from the `agents` config group.

An agent is a role; its policy is what trains. Three team levels (docs/team-shapes.md):
  separate models   each agent has its own weights (the default);
  a LoRA per role   `agents.share_base=true`: every agent is an adapter on ONE copy of the base
                    weights, switched with `set_adapter` before each use;
  a shared policy   `agents.share_policy=true`: every agent is the same model (full weights or one
                    LoRA adapter), so the agents differ only by their prompts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

import magrpo.models.cpu_bf16
from magrpo.config.schemas import (
    AgentOptimizerSchema,
    AgentSamplingSchema,
    AgentsSchema,
    HardwareSchema,
    LoraSchema,
    ModelSchema,
)
from magrpo.core.instances import as_data
from magrpo.core.schema import CheckpointError, ConfigError, SetupError
from magrpo.models import distributed, hub
from magrpo.models.cpu_bf16 import use_float32_products
from magrpo.models.sampler import set_vocab_limit
from magrpo.models.tiny import build_builtin

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
BUILTIN_PREFIX = "builtin:"
SHARED_POLICY = "policy"         # the name (metrics, checkpoint directory) of a policy every role shares


def seed_everything(seed: int) -> None:
    """Python's, numpy's and torch's random generators, seeded alike (a run, an evaluation)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resolve_model_path(name_or_path: str) -> str:
    """A loadable location: builtin:NAME is built locally, local paths must exist, anything
    else is a hub id."""
    if name_or_path.startswith(BUILTIN_PREFIX):
        return str(build_builtin(name_or_path[len(BUILTIN_PREFIX):]))
    return name_or_path


def looks_local(name_or_path: str) -> bool:
    return name_or_path.startswith(("/", "./", "../", "~")) or os.path.isabs(name_or_path)


def transcript(messages: list[dict[str, str]]) -> str:
    """A conversation as plain text, for models without a chat template (and for logs and critics):
    user turns as they are, each earlier answer under a "Your answer:" line."""
    return "\n\n".join(f"Your answer:\n{m['content'].strip()}" if m["role"] == "assistant" else m["content"]
                       for m in messages)


@dataclass
class Agent:
    index: int
    model: Any                       # PreTrainedModel or PeftModel
    tokenizer: Any
    device: torch.device
    adapter: str | None = None       # adapter name when agents share one base model
    chat_template_kwargs: dict = field(default_factory=dict)
    reference: Any = None            # frozen copy for the KL term (full fine-tuning only)
    # This agent's sampling keys over the shared ones: the keys its agents.models.K.sampling sets
    # (temperature, top_p, max_new_tokens; `own_sampling`), as plain data (team.json records it);
    # the updates score its samples at its own temperature.
    sampling: dict[str, Any] = field(default_factory=dict)
    policy: int = -1                 # index of the policy playing this role (-1: its own, = index)
    shared: bool = False             # the policy plays every role (agents.share_policy)
    _encoded: dict = field(default_factory=dict, repr=False)   # (prompt, max_length) -> token ids

    def __post_init__(self) -> None:
        if self.policy < 0:
            self.policy = self.index

    @property
    def name(self) -> str:
        return f"agent_{self.index + 1}"

    @property
    def policy_name(self) -> str:
        """The policy's name in metrics and checkpoints: the agent's own, or `policy` when shared."""
        return SHARED_POLICY if self.shared else self.name

    def temperature(self, shared: float) -> float:
        """The temperature this agent samples at, and so the one its log-probabilities use: its own
        (agents.models.K.sampling.temperature) where set, else the shared one (algo.temperature)."""
        own: float | None = self.sampling.get("temperature")
        return shared if own is None else own

    def max_new_tokens(self, shared: int) -> int:
        """This agent's cap on tokens per answer: its own (agents.models.K.sampling.max_new_tokens)
        where set, else the shared one (algo.max_new_tokens)."""
        own: int | None = self.sampling.get("max_new_tokens")
        return shared if own is None else own

    def activate(self) -> None:
        if self.adapter is not None:
            self.model.set_adapter(self.adapter)

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        if self.adapter is not None:
            return [p for n, p in self.model.named_parameters() if f".{self.adapter}." in n]
        return [p for p in self.model.parameters() if p.requires_grad]

    def encode_prompts(self, prompts: list[str] | list[list[dict[str, str]]],
                       max_length: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Left-padded ids and attention mask of the formatted prompts on the agent's device, and
        how many of them were longer than `max_length` tokens.

        A prompt is one user message or a conversation (multi-turn: user, assistant, user, ...). A
        longer one keeps its end, where the instruction is. Each distinct prompt is templated and
        tokenized once per run (training revisits the same items).
        """
        rows, truncated = [], 0
        for text in prompts:
            key = (text if isinstance(text, str) else tuple((m["role"], m["content"]) for m in text), max_length)
            hit = self._encoded.get(key)
            if hit is None:
                if len(self._encoded) >= 65536:
                    self._encoded.clear()
                ids = self.tokenizer(self.format_prompt(text), add_special_tokens=False)["input_ids"]
                hit = self._encoded[key] = (ids[-max_length:], len(ids) > max_length)
            rows.append(hit[0])
            truncated += hit[1]
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self.tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            if r:
                input_ids[i, width - len(r):] = torch.tensor(r)
                mask[i, width - len(r):] = 1
        return input_ids.to(self.device), mask.to(self.device), truncated

    def format_prompt(self, text: str | list[dict[str, str]]) -> str:
        """The chat template when the tokenizer has one, else the plain prompt. `text` is one user
        message, or a conversation (a multi-turn episode: user, assistant, user, ...)."""
        messages = [{"role": "user", "content": text}] if isinstance(text, str) else text
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                      **self.chat_template_kwargs)
        return text if isinstance(text, str) else transcript(messages)

    @contextlib.contextmanager
    def reference_mode(self):
        """Context in which `reference_model()` forwards give the frozen reference policy."""
        if self.reference is not None:
            yield self.reference
        elif hasattr(self.model, "disable_adapter"):
            with self.model.disable_adapter():
                yield self.model
        else:
            raise RuntimeError(f"{self.name} has no reference model (algo.beta > 0 needs one)")


def team_level(agents_cfg: AgentsSchema) -> str:
    """Which of the three team levels an `agents` config builds (module docstring)."""
    if agents_cfg.share_policy:
        return "shared_policy"
    return "lora_per_role" if agents_cfg.share_base else "separate"


def policy_groups(agents: list[Agent]) -> list[list[Agent]]:
    """The roles each policy plays, one list per policy in order (the policy's first role first):
    what trains, saves and loads once per policy."""
    groups: dict[int, list[Agent]] = {}
    for a in agents:
        groups.setdefault(a.policy, []).append(a)
    return list(groups.values())


def policy_agents(agents: list[Agent]) -> list[Agent]:
    """One agent per policy (its first role): what builds optimizers, saves and loads."""
    return [roles[0] for roles in policy_groups(agents)]


def _peft_lib():
    """peft, imported where a LoRA model is made or loaded: about 2 s of a start that needs none."""
    import peft  # noqa: PLC0415  start-up: peft (about 2 s) loads only for a LoRA model

    return peft


def _lora_config(lora: LoraSchema | None, index: int):
    """peft's LoraConfig of agent `index`'s `lora` node (agents.models[index].lora)."""
    if lora is None:
        raise ConfigError(f"agents.models[{index}].lora is null: a LoRA adapter per role (agents.share_base=true) "
                          f"needs each agent's lora settings")
    target = lora.target_modules
    target = target if isinstance(target, str) else list(target)
    return _peft_lib().LoraConfig(r=lora.r, lora_alpha=lora.lora_alpha, lora_dropout=lora.lora_dropout,
                      target_modules=target, bias=lora.bias, task_type="CAUSAL_LM")


def _load_tokenizer(spec: ModelSchema, path: str):

    tok = AutoTokenizer.from_pretrained(resolve_model_path(spec.tokenizer) if spec.tokenizer else path,
                                        revision=spec.revision, trust_remote_code=spec.trust_remote_code)
    tok.padding_side = "left"  # generation appends to the right end of every row
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    _check_chat_template(tok, spec)
    return tok


def _check_chat_template(tok: Any, spec: ModelSchema) -> None:
    """Render the tokenizer's chat template once at load: a template that transformers' Jinja
    sandbox blocks (or that does not render) stops the load with one line, not a run later."""
    if not getattr(tok, "chat_template", None):
        return
    probe = [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"},
             {"role": "user", "content": "and?"}]
    try:
        tok.apply_chat_template(probe, tokenize=False, add_generation_prompt=True,
                                **as_data(spec.chat_template_kwargs or {}))
    except Exception as e:
        from jinja2.exceptions import SecurityError  # noqa: PLC0415  start-up: jinja2 (transformers' templates) only on a template that fails

        what = ("is blocked by the Jinja sandbox" if isinstance(e, SecurityError) else "does not render")
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SetupError(f"the chat template of the tokenizer of {spec.name_or_path!r} {what} "
                         f"({type(e).__name__}: {first[:200]}); use a tokenizer whose template renders, or set "
                         f"agents.models.N.tokenizer to one") from None


def _peft(model, *args, **kwargs):
    """peft's `get_peft_model`, without the FutureWarning it triggers itself: peft reads the model's
    `is_gradient_checkpointing`, which transformers 5 renamed (nothing the user can act on)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return _peft_lib().get_peft_model(model, *args, **kwargs)


def _enable_checkpointing(model) -> None:
    """Recompute each layer's activations in backward (transformers' non-reentrant checkpointing,
    which also serves frozen bases under a LoRA adapter)."""
    enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    enable({"use_reentrant": False})


def _with_autocast(model, autocast: str):
    """Run every forward of `model` under bf16 autocast (`hardware.autocast=bf16`): matmuls in bf16,
    weights, gradients and optimizer state in the model's own dtype."""
    if autocast == "none":
        return model
    device_type = next(model.parameters()).device.type
    model.forward = torch.autocast(device_type=device_type, dtype=torch.bfloat16)(model.forward)
    return model


def _load_model(spec: ModelSchema, path: str, device: torch.device, safetensors_only: bool = False):
    """`safetensors_only`: a shared artifact's weights (an exported team) are safetensors or nothing."""

    dtype = "auto" if spec.dtype == "auto" else DTYPES[spec.dtype]
    kwargs: dict[str, Any] = dict(revision=spec.revision, trust_remote_code=spec.trust_remote_code, dtype=dtype)
    if safetensors_only:
        kwargs["use_safetensors"] = True
    if spec.trust_remote_code:
        log.warning("agents: trust_remote_code=true for %s: Python code shipped with the model may run",
                    spec.name_or_path)
    if spec.attn_implementation:
        kwargs["attn_implementation"] = spec.attn_implementation
    with hub.quiet_bars("transformers"):        # one "Loading weights" bar per agent is noise
        model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    return model.to(device)


@contextlib.contextmanager
def _loading(spec: ModelSchema, index: int | str):
    """Any failure to load agent `index`'s model or tokenizer is a SetupError that names the model."""
    try:
        if not looks_local(spec.name_or_path) and not str(spec.name_or_path).startswith(BUILTIN_PREFIX):
            hub.ensure_mode()       # offline: the cache only, and a fast failure
        yield
    except Exception as e:
        if not looks_local(spec.name_or_path) and hub.offline_reason() is not None:
            raise SetupError(f"could not load agents.models[{index}]: "
                             + hub.unreachable_hint("model", spec.name_or_path, f"agents.models.{index}.name_or_path")
                             ) from e
        hint = ""
        if isinstance(e, OSError) and not looks_local(spec.name_or_path):
            hint = (f" Offline, download it first (hf download {spec.name_or_path} --local-dir DIR) and give its "
                    f"local path: agents.models.{index}.name_or_path=DIR")
        raise SetupError(f"could not load model {spec.name_or_path!r} (agents.models[{index}]): "
                         f"{type(e).__name__}: {str(e).strip().rstrip('.')}.{hint}") from e


def agent_devices(hw: HardwareSchema, n: int) -> list[torch.device]:
    world = distributed.world()
    if world.distributed and world.backend == "nccl":
        if hw.agent_devices:
            raise ValueError("hardware.agent_devices is for one process; under torchrun each rank uses its own "
                             "GPU (cuda:LOCAL_RANK): set hardware.agent_devices=null")
        return [torch.device("cuda", world.local_rank)] * n
    if hw.agent_devices:
        devs = list(hw.agent_devices)
        return [torch.device(devs[i % len(devs)]) for i in range(n)]
    dev = hw.device
    if dev == "auto":
        dev = "cuda" if torch.cuda.is_available() else "cpu"
    return [torch.device(dev)] * n


def cuda_memory_metrics(agents: list[Agent]) -> dict[str, float]:
    """Peak CUDA memory so far over the agents' devices, in GiB (`torch.cuda.max_memory_allocated`:
    tensors; `..._reserved_`: what the caching allocator holds); empty when no agent is on a GPU."""
    devices = {a.device for a in agents if a.device.type == "cuda"}
    if not devices:
        return {}
    return {"memory/peak_cuda_gb": max(torch.cuda.max_memory_allocated(d) for d in devices) / 2**30,
            "memory/peak_cuda_reserved_gb": max(torch.cuda.max_memory_reserved(d) for d in devices) / 2**30}


def set_keys(node: AgentOptimizerSchema | AgentSamplingSchema | None) -> dict[str, Any]:
    """The keys of an agent's settings (agents.models.K.optimizer, .sampling) that are not null; {}
    for a missing node."""
    return {k: v for k, v in (as_data(node) if node is not None else {}).items() if v is not None}


def own_sampling(spec: ModelSchema) -> dict[str, Any]:
    """The non-null keys of a models entry's `sampling` node."""
    return set_keys(spec.sampling)


def load_agents(agents_cfg: AgentsSchema, hw_cfg: HardwareSchema, num_agents: int, need_reference: bool,
                safetensors_only: bool = False) -> list[Agent]:
    """Load `num_agents` agents (the first `num_agents` model entries; one entry serves all).
    With `agents.share_policy`, one model is loaded and every agent is a role it plays.
    `safetensors_only`: the models are a shared artifact's (an exported team): no pickled weights."""
    if agents_cfg.share_policy and num_agents > 1:
        first = replace(_load_models(agents_cfg, hw_cfg, 1, need_reference, safetensors_only)[0], shared=True)
        log.info("one shared policy plays %d roles", num_agents)
        return [first] + [replace(first, index=i, policy=first.index, _encoded=first._encoded)
                          for i in range(1, num_agents)]
    return _load_models(agents_cfg, hw_cfg, num_agents, need_reference, safetensors_only)


def _computes_bf16(model, autocast: str) -> bool:
    return autocast == "bf16" or any(p.dtype == torch.bfloat16 for p in model.parameters())


def widens_bf16(model, device: torch.device, autocast: str, cpu_bf16: str = "auto") -> bool:
    """Whether `model`'s linear products run widened to float32 and rounded to bf16 (magrpo.models.cpu_bf16):
    it computes in bf16 (bf16 weights, or `hardware.autocast=bf16`) on a CPU, and `hardware.cpu_bf16`
    asks for it: `auto` where the CPU has no bf16 matrix unit (AVX512-BF16 or AMX), whose generic
    bf16 kernel is too slow to train; `widen` on any CPU; `native` never."""
    return device.type == "cpu" and _computes_bf16(model, autocast) and magrpo.models.cpu_bf16.widens(cpu_bf16)


def _widen_cpu_bf16(model, device: torch.device, autocast: str, cpu_bf16: str, who: str) -> None:
    """Where `widens_bf16`, every linear product of `model` runs widened to float32 and is rounded
    back to bf16, as a bf16 GEMM accumulates (magrpo.models.cpu_bf16): on a CPU without a bf16 unit, a 1.7B
    step in minutes, not hours."""
    if widens_bf16(model, device, autocast, cpu_bf16):
        use_float32_products(model)
        why = "hardware.cpu_bf16=widen" if cpu_bf16 == "widen" else "bf16 on a CPU without AVX512-BF16 or AMX"
        log.info("%s: %s; linear products widened to float32 (magrpo.models.cpu_bf16)", who, why)
    elif device.type == "cpu" and _computes_bf16(model, autocast) and not magrpo.models.cpu_bf16.cpu_has_native_bf16():
        log.info("%s: hardware.cpu_bf16=native on a CPU without AVX512-BF16 or AMX: torch's generic bf16 "
                 "kernels, far slower than float32 to train (docs/scaling.md, \"What fits where\")", who)


def _load_models(agents_cfg: AgentsSchema, hw_cfg: HardwareSchema, num_agents: int, need_reference: bool,
                 safetensors_only: bool = False) -> list[Agent]:
    models = list(agents_cfg.models)
    specs = [models[i] if len(models) > 1 else models[0] for i in range(num_agents)]
    devices = agent_devices(hw_cfg, num_agents)
    if any(d.type == "cuda" for d in devices):
        # process-wide: torch keeps the attention backends global
        torch.backends.cuda.enable_cudnn_sdp(hw_cfg.cudnn_attention)
    checkpointing = hw_cfg.gradient_checkpointing
    autocast, cpu_bf16 = hw_cfg.autocast, hw_cfg.cpu_bf16
    agents: list[Agent] = []
    if agents_cfg.share_base:
        spec = specs[0]
        with _loading(spec, 0):
            path = resolve_model_path(spec.name_or_path)
            tok = _load_tokenizer(spec, path)
            base = _with_autocast(_load_model(spec, path, devices[0], safetensors_only), autocast)
        if checkpointing:
            _enable_checkpointing(base)
        model = _peft(base, _lora_config(spec.lora, 0), adapter_name="agent_1")
        for i in range(1, num_agents):
            model.add_adapter(f"agent_{i + 1}", _lora_config(specs[i].lora, i if len(models) > 1 else 0))
        _widen_cpu_bf16(model, devices[0], autocast, cpu_bf16, "the shared base")
        set_vocab_limit(model, tok)
        log.info("loaded %d agent(s) as LoRA adapters on one base: %s@%s", num_agents, spec.name_or_path, devices[0])
        for i in range(num_agents):
            agents.append(Agent(i, model, tok, devices[0], adapter=f"agent_{i + 1}",
                                chat_template_kwargs=as_data(spec.chat_template_kwargs or {}),
                                sampling=own_sampling(specs[i])))
        return agents
    for i, spec in enumerate(specs):
        with _loading(spec, i if len(models) > 1 else 0):
            path = resolve_model_path(spec.name_or_path)
            tok = _load_tokenizer(spec, path)
            model = _with_autocast(_load_model(spec, path, devices[i], safetensors_only), autocast)
        if checkpointing:
            _enable_checkpointing(model)
        reference = None
        if spec.lora is not None:
            model = _peft(model, _lora_config(spec.lora, i))
        elif need_reference:
            reference = _with_autocast(_load_model(spec, path, devices[i], safetensors_only), autocast).eval().requires_grad_(False)
            _widen_cpu_bf16(reference, devices[i], autocast, cpu_bf16, f"agent_{i + 1}'s reference")
            set_vocab_limit(reference, tok)
        _widen_cpu_bf16(model, devices[i], autocast, cpu_bf16, f"agent_{i + 1}")
        set_vocab_limit(model, tok)
        agents.append(Agent(i, model, tok, devices[i], reference=reference,
                            chat_template_kwargs=as_data(spec.chat_template_kwargs or {}), sampling=own_sampling(spec)))
    log.info("loaded %d agent(s): %s", num_agents,
             ", ".join(f"{a.name}={s.name_or_path}@{a.device}" for a, s in zip(agents, specs)))
    return agents


def save_agent(agent: Agent, out: Path, state_dict: dict | None = None) -> None:
    """Weights (or the adapter) and tokenizer of one agent, loadable with from_pretrained.
    `state_dict`: the gathered weights of a sharded (fsdp) model."""
    out.mkdir(parents=True, exist_ok=True)
    kwargs = {} if state_dict is None else {"state_dict": state_dict}
    with hub.quiet_bars("transformers"):        # a "Writing model shards" bar per save is noise
        if agent.adapter is not None:
            agent.model.save_pretrained(str(out), selected_adapters=[agent.adapter], **kwargs)
        else:
            agent.model.save_pretrained(str(out), **kwargs)
    agent.tokenizer.save_pretrained(str(out))


# The weight files `save_agent` writes (save_pretrained): a LoRA adapter's, in the agent's folder or
# in its adapter's subfolder; a full model's, one file or its shards, in the agent's folder.
ADAPTER_WEIGHTS = "adapter_model.safetensors"
_MODEL_WEIGHTS = re.compile(r"model(-\d+-of-\d+)?\.safetensors")


def _saved_weights(agent: Agent, src: Path, files: list[Path]) -> list[Path]:
    """The files of `files` that `save_agent` writes for `agent`; any other weight file is refused
    (CheckpointError, one line, as a file a manifest does not list): it would be read alongside the
    saved weights, and its values would reach them."""
    peft = agent.adapter is not None or hasattr(agent.model, "peft_config")
    if peft:
        allowed = {src / ADAPTER_WEIGHTS, src / (agent.adapter or "default") / ADAPTER_WEIGHTS}
        ok, what = (lambda f: f in allowed), f"a LoRA adapter's {ADAPTER_WEIGHTS}"
    else:
        ok, what = (lambda f: f.parent == src and bool(_MODEL_WEIGHTS.fullmatch(f.name))), "model.safetensors or its shards"
    other = [f for f in files if not ok(f)]
    if other:
        raise CheckpointError(src, f"refused weights: {other[0].relative_to(src).as_posix()} is not a file that "
                                   f"{agent.name}'s weights are saved in ({what}); remove it, or save the weights again")
    return files


def load_agent_weights(agent: Agent, src: Path) -> None:
    """Restore weights saved by `save_agent` into an already built agent (for resume, a checkpoint's
    or an exported LoRA team's weights): its saved files only (`_saved_weights`)."""
    files = _saved_weights(agent, src, sorted(src.rglob("*.safetensors")))
    if not files:
        raise SetupError(f"no weights (*.safetensors) under {src}")
    state = {}
    for f in files:
        try:
            state.update(load_file(str(f)))
        except Exception as e:     # not safetensors (truncated, another format): one line that names it
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise SetupError(f"cannot read the weights {f} ({type(e).__name__}: {first[:200]})") from None
    try:
        if agent.adapter is not None or hasattr(agent.model, "peft_config"):
            _peft_lib().set_peft_model_state_dict(agent.model, state, adapter_name=agent.adapter or "default")
            return
        missing, unexpected = agent.model.load_state_dict(state, strict=False)
    except RuntimeError as e:       # a tensor of another shape
        lines = str(e).strip().splitlines()
        raise SetupError(f"the weights under {src} do not fit {agent.name}: "
                         f"{' '.join(x.strip() for x in lines[:3])[:300]}") from None
    # Tied embeddings are saved once; everything else must match.
    missing = [k for k in missing if "lm_head" not in k]
    if missing or unexpected:
        raise SetupError(f"the weights under {src} do not match {agent.name}: missing={missing[:5]} "
                         f"unexpected={unexpected[:5]}")
