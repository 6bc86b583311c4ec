"""The architectures of the built-in models, as data: what `builtin:NAME` builds (magrpo.models.tiny) and
what magrpo.models.memory estimates, readable without torch or transformers.

`BUILTIN_MODELS` maps each name to the Qwen2Config/Qwen3Config arguments of its architecture;
`SHAPES` are the real models' dimensions (transcribed from the public config.json of each), built
with random weights; `TOKENIZER_VOCAB` is the size of the tokenizer every builtin shares.
"""

from __future__ import annotations

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
