"""Built-in models with random weights and a locally trained tokenizer.

They let the default run, the tests and the benchmark work with no network: `builtin:NAME` as a
model path builds NAME once into the cache (~/.cache/magrpo/models, or $MAGRPO_CACHE/models)
and later runs load it from there at once. Weights come from a fixed seed, so every machine
builds the same model.

Two kinds:
  tiny, small          small Qwen2-style models (0.1M / 0.7M parameters), float32: the default run,
                       the tests and the benchmark;
  *-shape              the real architectures of the models users train, at their real dimensions
                       (`SHAPES`, transcribed from the public config.json of each; magrpo.models.model_shapes holds them
                       as data, which magrpo.models.memory and the schemas read without torch), random weights:
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
magrpo.models.agents records len(tokenizer) on the loaded model (`set_vocab_limit`), and the shared-prompt
sampler, `model.generate` (a logits processor) and `token_logprobs` in the update all use only the
first len(tokenizer) logits (magrpo.models.sampler.vocab_limit), so sampling and scoring see one
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

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from magrpo.models.model_shapes import BUILTIN_MODELS, SHAPES, TOKENIZER_VOCAB  # noqa: F401  (re-exported: the builtins' data)

log = logging.getLogger(__name__)

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
