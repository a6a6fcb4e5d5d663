"""What the TRL scripts train with: a tiny Llama's config and GRPO's settings for a few CPU steps (imported as a
sibling module, as word_level is: a script's folder is first on sys.path)."""

from transformers import LlamaConfig, PreTrainedTokenizerFast
from trl import GRPOConfig


def llama_config(
    tok: PreTrainedTokenizerFast, max_positions: int, *, hidden: int = 16, layers: int = 1, heads: int = 2
) -> LlamaConfig:
    """A Llama of LAYERS layers of width HIDDEN (HEADS heads) over TOK's words, its context MAX_POSITIONS tokens."""
    return LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.eos_token_id,
    )


def grpo_config(output_dir: str, *, seed: int = 0, **fields: object) -> GRPOConfig:
    """GRPO on the CPU, writing to OUTPUT_DIR: every step logged, nothing saved or reported, FIELDS as given."""
    return GRPOConfig(
        output_dir=output_dir, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, seed=seed, **fields
    )
