"""A character-level tokenizer built in code (nothing downloaded) and the chat template.

The tokenizer is saved next to the weights (``tokenizer.json``), so anything that loads a
published version (a simulation worker, a vLLM server) tokenises exactly as the trainer does.
"""

from __future__ import annotations

import json
import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from ..schemas import ChatMessage

PAD = "<|pad|>"
UNK = "<|unk|>"
END = "<|end|>"
ROLE_TOKENS = {
    "system": "<|system|>",
    "developer": "<|system|>",
    "user": "<|user|>",
    "assistant": "<|assistant|>",
    "tool": "<|tool|>",
}
SPECIAL_TOKENS = [PAD, UNK, END, *dict.fromkeys(ROLE_TOKENS.values())]
DEFAULT_ALPHABET = string.printable
CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{{ '<|system|>' if m['role'] in ('system', 'developer') else '<|' + m['role'] + '|>' }}"
    "{%- if m['content'] is string -%}{{ m['content'] }}"
    "{%- elif m['content'] is not none -%}"
    "{%- for part in m['content'] -%}{{ part['text'] if 'text' in part else '' }}{%- endfor -%}"
    "{%- endif -%}"
    "{%- for call in m['tool_calls'] or [] -%}"
    "{{ '\\n' + {'tool': call['function']['name'], 'arguments': call['function']['arguments']}"
    "|tojson(ensure_ascii=True) }}"
    "{%- endfor -%}"
    "<|end|>"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"
)
"""The chat template saved with the tokenizer: the same tokens as :func:`render_prompt`, so a
simulation worker or a vLLM server that loads a published version prompts the policy exactly
as the trainer sees the conversation."""


def build_tokenizer(alphabet: str = "") -> PreTrainedTokenizerFast:
    """A tokenizer with one token per character of ``alphabet`` plus the chat special tokens."""
    chars = list(dict.fromkeys(alphabet or DEFAULT_ALPHABET))
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in chars:
        vocab.setdefault(ch, len(vocab))
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    core.add_special_tokens(SPECIAL_TOKENS)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        unk_token=UNK,
        eos_token=END,
        additional_special_tokens=[t for t in SPECIAL_TOKENS if t not in (PAD, UNK, END)],
        chat_template=CHAT_TEMPLATE,
    )


def message_text(message: ChatMessage) -> str:
    """The visible text of a message: its content, then its tool calls as JSON lines."""
    content = message.content
    if isinstance(content, list):
        text = "".join(str(part.get("text", "")) for part in content)
    else:
        text = content or ""
    for call in message.tool_calls or ():
        args = call.function.arguments
        text += "\n" + json.dumps({"tool": call.function.name, "arguments": args})
    return text


def role_token(message: ChatMessage) -> str:
    """The special token that opens a message of this role."""
    return ROLE_TOKENS[message.role]


def encode_text(tokenizer: PreTrainedTokenizerFast, text: str) -> list[int]:
    """Token ids of plain text (no special tokens added)."""
    return list(tokenizer.encode(text, add_special_tokens=False))


def render_prompt(tokenizer: PreTrainedTokenizerFast, messages: list[ChatMessage]) -> list[int]:
    """Token ids of ``messages`` followed by the assistant header (a generation prompt)."""
    ids: list[int] = []
    for message in messages:
        ids += render_message(tokenizer, message)
    return [*ids, tokenizer.convert_tokens_to_ids(ROLE_TOKENS["assistant"])]


def render_message(tokenizer: PreTrainedTokenizerFast, message: ChatMessage) -> list[int]:
    """``<|role|>`` + text + ``<|end|>`` as token ids."""
    opener = tokenizer.convert_tokens_to_ids(role_token(message))
    return [opener, *encode_text(tokenizer, message_text(message)), end_id(tokenizer)]


def end_id(tokenizer: PreTrainedTokenizerFast) -> int:
    """Id of the end-of-message token the policy emits to stop."""
    return int(tokenizer.convert_tokens_to_ids(END))
