"""The tokenizer the framework scripts build instead of downloading one: one token per whitespace-separated word,
so decoding gives the words back joined by single spaces."""

from collections.abc import Iterable

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast


def tokenizer(words: Iterable[str]) -> PreTrainedTokenizerFast:
    vocab = {w: i for i, w in enumerate(["<pad>", "<eos>", "<unk>", *dict.fromkeys(words)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


# A ChatML-like chat template in words, that renders tool calls (hermes style, as TRL's and verl's parsers read them)
# and tool results; each message ends with the eos token, as TRL's tool loop expects of a turn's end.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|> {{ m.role }} "
    "{% if m.role == 'tool' %}<tool_response> {{ m.content }} </tool_response>{% else %}{{ m.content or '' }}{% endif %}"
    "{% for c in m.tool_calls or [] %} <tool_call> {{ c.function | tojson }} </tool_call>{% endfor %} <eos> {% endfor %}"
    "{% if add_generation_prompt %}<|im_start|> assistant {% endif %}"
)
CHAT_WORDS = ["<|im_start|>", "system", "user", "assistant", "tool", "<tool_response>", "</tool_response>"]


def chat_tokenizer(words: Iterable[str]) -> PreTrainedTokenizerFast:
    """`tokenizer` with CHAT_TEMPLATE and its words (`words`: the others, the eos token left out)."""
    tok = tokenizer([*CHAT_WORDS, *words])
    tok.chat_template = CHAT_TEMPLATE
    return tok
