"""Built-in models with random weights and a locally trained tokenizer.

They let the default run, the tests and the benchmark work with no network: `builtin:NAME` as a
model path builds NAME once into the cache (~/.cache/magrpo/models, or $MAGRPO_CACHE/models)
and later runs load it from there at once. Weights come from a fixed seed, so every machine
builds the same model.

Two kinds:
  tiny, small          small Qwen2-style models (0.1M / 0.7M parameters), float32: the default run,
                       the tests and the benchmark;
  *-shape              the real architectures of the models users train, at their real dimensions
                       (`SHAPES`, transcribed from the public config.json of each), random weights:
                       they exercise generation, the update, LoRA, the reference model, checkpointing
                       and bf16 at real memory and compute cost with no download (docs/scaling.md, "What
                       fits where"). They are built in bfloat16 directly (the default dtype is bf16 while
                       the modules are constructed and initialised, so no float32 copy of the weights
                       ever exists), then saved once into the cache (3.4 GB for qwen3-1.7b-shape, 6.2
                       GB for qwen2.5-coder-3b-shape): every consumer of a model path (the reference
                       copy, resume, Team.from_run, magrpo-export) then loads them like any other model,
                       memory-mapped, in seconds rather than re-initialising 1.7-3B random numbers.

Every builtin uses the same 512-token byte-level BPE tokenizer. A shape keeps its real vocabulary
(151936 rows of embedding and LM head: the real memory), so the model's vocabulary is larger than
the tokenizer's. Ids >= len(tokenizer) are no tokens at all (the real Qwen checkpoints have the same
gap: 151665 tokens, 151936 rows); they are never sampled and never count in a log-probability:
magrpo.models records len(tokenizer) on the loaded model (`set_vocab_limit`), and the shared-prompt
sampler, `model.generate` (a logits processor) and `token_logprobs` in the update all use only the
first len(tokenizer) logits (magrpo.sampler.vocab_limit), so sampling and scoring see one
distribution.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

TOKENIZER_VOCAB = 512
# The real architectures (public config.json of each checkpoint): keys are Qwen2Config/Qwen3Config
# arguments, plus `model_type` (qwen2 or qwen3; qwen3 adds the per-head q_norm/k_norm) and `dtype`.
_QWEN_COMMON = dict(vocab_size=151936, rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu",
                    rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}, attention_dropout=0.0,
                    initializer_range=0.02, dtype="bfloat16")
SHAPES: dict[str, dict] = {
    # Qwen/Qwen3-1.7B: Qwen3ForCausalLM, 1.72B parameters (1.41B without the tied embedding)
    "qwen3-1.7b-shape": dict(_QWEN_COMMON, model_type="qwen3", hidden_size=2048, num_hidden_layers=28,
                             num_attention_heads=16, num_key_value_heads=8, head_dim=128, intermediate_size=6144,
                             max_position_embeddings=40960, attention_bias=False, use_sliding_window=False,
                             max_window_layers=28),
    # Qwen/Qwen2.5-Coder-3B(-Instruct): Qwen2ForCausalLM (q/k/v bias), 3.09B parameters (2.77B without the embedding)
    "qwen2.5-coder-3b-shape": dict(_QWEN_COMMON, model_type="qwen2", hidden_size=2048, num_hidden_layers=36,
                                   num_attention_heads=16, num_key_value_heads=2, intermediate_size=11008,
                                   max_position_embeddings=32768, use_sliding_window=False, max_window_layers=70),
    # Qwen/Qwen2.5-Coder-1.5B(-Instruct): Qwen2ForCausalLM, 1.54B parameters (agents=heterogeneous)
    "qwen2.5-coder-1.5b-shape": dict(_QWEN_COMMON, model_type="qwen2", hidden_size=1536, num_hidden_layers=28,
                                     num_attention_heads=12, num_key_value_heads=2, intermediate_size=8960,
                                     max_position_embeddings=32768, use_sliding_window=False, max_window_layers=21),
}
# Architecture of each builtin model. "small" is the benchmark model of the foundation issue.
# "tiny-wide" is tiny with a model vocabulary (1024) larger than its tokenizer's (512), as the shapes.
BUILTIN_MODELS: dict[str, dict] = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=512),
    "small": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=256, vocab_size=512),
    "tiny-wide": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=128, vocab_size=1024),
    **SHAPES,
}
BUILD_SEED = 1234
EOS_TOKEN = "<|endoftext|>"
# Bumped whenever the build recipe changes, so stale caches are rebuilt rather than reused.
RECIPE_VERSION = 1

# Deterministic training text for the byte-level BPE: common English and code fragments, so
# every task's prompts tokenize into a few hundred merges rather than raw bytes.
_CORPUS = """
the of and to in is that it for on with as was be by this are or at from an have not but
what all were when we there can more if will about one out so up into has do than its no
explain describe write summary short long paragraph sentence answer question detail example
because however therefore moreover although furthermore for example in addition as a result
first second then finally also while since until before after during between through
background motivation method results implications introduction abstract study model data
def return import from class if else elif for while in not and or None True False print
self len range list dict str int float assert lambda yield try except raise with as pass
water cycle bees honey sky blue history paper bicycle star leaves colour vaccines printing
tides bread compass birds dreams volcano chess rainbow refrigerator football cats glass atom
coral moon seed tree airplane sound maps ice library letter coffee sleep bridge cheese light
""".split()


def cache_root() -> Path:
    base = os.environ.get("MAGRPO_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "magrpo")
    return Path(base) / "models"


def builtin_path(name: str) -> Path:
    if name not in BUILTIN_MODELS:
        raise ValueError(f"unknown builtin model {name!r}; choose one of: {', '.join(sorted(BUILTIN_MODELS))}")
    spec = json.dumps({"arch": BUILTIN_MODELS[name], "seed": BUILD_SEED, "v": RECIPE_VERSION}, sort_keys=True)
    return cache_root() / f"{name}-{hashlib.sha1(spec.encode()).hexdigest()[:10]}"


def _train_tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: PLC0415  start-up: the tokenizer library loads only to build a tiny model
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415  start-up: magrpo.memory and the schemas read the tiny shapes without torch

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS_TOKEN],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    # Repeating lines with varying word order gives the trainer stable pair counts.
    lines = [" ".join(_CORPUS[i:] + _CORPUS[:i]) for i in range(0, len(_CORPUS), 7)]
    tok.train_from_iterator(lines, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN,
                                   padding_side="left", model_max_length=2048)


def builtin_config(name: str, tokenizer=None):
    """The transformers config of builtin `name` (no weights). Token ids come from `tokenizer`,
    or are the builtin tokenizer's (EOS = pad = 0) when it is not given."""
    from transformers import Qwen2Config, Qwen3Config  # noqa: PLC0415  start-up: magrpo.memory and the schemas read the tiny shapes without torch

    if name not in BUILTIN_MODELS:
        builtin_path(name)          # the error naming the choices
    arch = dict(BUILTIN_MODELS[name])
    kind = arch.pop("model_type", "qwen2")
    if kind == "qwen2" and "max_position_embeddings" not in arch:      # tiny, small
        arch.update(max_position_embeddings=2048, tie_word_embeddings=True)
    eos = tokenizer.eos_token_id if tokenizer is not None else 0
    pad = tokenizer.pad_token_id if tokenizer is not None else 0
    cls = {"qwen2": Qwen2Config, "qwen3": Qwen3Config}[kind]
    return cls(**arch, bos_token_id=eos, eos_token_id=eos, pad_token_id=pad, use_cache=True)


def build_builtin(name: str) -> Path:
    """Build model `name` into the cache if it is not there yet; return its directory."""
    out = builtin_path(name)
    if (out / "config.json").exists():
        return out
    import torch  # noqa: PLC0415  start-up: magrpo.memory and the schemas read the tiny shapes without torch
    from transformers import Qwen2ForCausalLM, Qwen3ForCausalLM  # noqa: PLC0415  start-up: magrpo.memory and the schemas read the tiny shapes without torch

    # The real shapes take a while on a CPU (qwen3-1.7b-shape: about 90 s), once per cache.
    log.info("building builtin:%s into %s (first use; later runs load it from there)", name, out)
    t0 = time.perf_counter()
    tokenizer = _train_tokenizer(TOKENIZER_VOCAB)
    config = builtin_config(name, tokenizer)
    model_cls = Qwen3ForCausalLM if config.model_type == "qwen3" else Qwen2ForCausalLM
    dtype = getattr(torch, BUILTIN_MODELS[name].get("dtype", "float32"))
    state, default_dtype = torch.random.get_rng_state(), torch.get_default_dtype()
    torch.manual_seed(BUILD_SEED)
    # Constructed and initialised in `dtype` (the default dtype meanwhile): a bf16 shape never
    # holds a float32 copy (1.7B parameters: 3.4 GB, not 6.9 GB and then 3.4 GB).
    torch.set_default_dtype(dtype)
    try:
        model = model_cls(config)
    finally:
        torch.set_default_dtype(default_dtype)
        torch.random.set_rng_state(state)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    # Build in a temporary sibling and rename, so concurrent runs (a sweep's first jobs) never
    # read a half-written directory.
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.replace(tmp, out)
        log.info("built builtin:%s in %.1f s", name, time.perf_counter() - t0)
    except OSError:
        if not (out / "config.json").exists():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
