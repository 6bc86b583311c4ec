"""Small Qwen2-style models with random weights and a locally trained tokenizer.

They let the default run, the tests and the benchmark work with no network: `builtin:NAME` as a
model path builds NAME once into the cache (~/.cache/magrpo/models, or $MAGRPO_CACHE/models)
and later runs load it from there at once. Weights come from a fixed seed, so every machine
builds the same model.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

# Architecture of each builtin model. "small" is the benchmark model of the foundation issue.
BUILTIN_MODELS: dict[str, dict] = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=512),
    "small": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=256, vocab_size=512),
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
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

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


def build_builtin(name: str) -> Path:
    """Build model `name` into the cache if it is not there yet; return its directory."""
    out = builtin_path(name)
    if (out / "config.json").exists():
        return out
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    arch = BUILTIN_MODELS[name]
    tokenizer = _train_tokenizer(arch["vocab_size"])
    config = Qwen2Config(**arch, max_position_embeddings=2048, tie_word_embeddings=True,
                         bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, use_cache=True)
    state = torch.random.get_rng_state()
    torch.manual_seed(BUILD_SEED)
    try:
        model = Qwen2ForCausalLM(config)
    finally:
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
    except OSError:
        if not (out / "config.json").exists():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
