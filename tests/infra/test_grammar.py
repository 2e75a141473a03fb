"""Grammar-constrained decoding: greedy with the forced tokens fed at once writes the same
JSON as Hugging Face ``generate`` under the same grammar, valid under the schema, in fewer
forward passes."""

from __future__ import annotations

import json

import jsonschema
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessorList

from safactory.infra.grammar import greedy, json_schema
from safactory.infra.models import chat_ids, ensure_smollm2

SCHEMA = {
    "type": "object",
    "properties": {
        "colour": {"enum": ["crimson", "turquoise", "ochre"]},
        "count": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
    },
    "required": ["colour", "count", "tags"],
    "additionalProperties": False,
}


def test_greedy_with_forced_tokens_matches_generate_in_fewer_passes() -> None:
    path = ensure_smollm2(progress=False)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True).eval()
    make = json_schema(tokenizer, SCHEMA)
    ask = [{"role": "user", "content": "Describe a sunset as JSON: a colour, a count, tags."}]
    prompt = chat_ids(tokenizer, ask, add_generation_prompt=True)

    passes = 0
    forward = model.forward

    def counted(*args: object, **kwargs: object) -> object:
        nonlocal passes
        passes += 1
        return forward(*args, **kwargs)

    model.forward = counted  # type: ignore[method-assign]
    fast = greedy(model, prompt, make(), 60, tokenizer.eos_token_id)
    fast_passes, passes = passes, 0
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            logits_processor=LogitsProcessorList([make()]),
            do_sample=False,
            max_new_tokens=60,
            pad_token_id=tokenizer.eos_token_id,
        )
    slow = out[0, len(prompt) :].tolist()
    text = tokenizer.decode(fast, skip_special_tokens=True)
    jsonschema.validate(json.loads(text), SCHEMA)
    assert text == tokenizer.decode(slow, skip_special_tokens=True)
    assert fast_passes < passes, (fast_passes, passes)
