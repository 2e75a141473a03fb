"""A local Hugging Face causal LM as a policy, recording token ids and behaviour logprobs.

The chat is rendered with the checkpoint's chat template (a version published by the
trainer carries one) or else a plain template (``<|role|>`` lines), the model samples a
reply, and the sampled tokens' logprobs (the behaviour policy's, for importance
correction in training) are recorded with their ids. A reply that contains a JSON object
``{"name": ..., "arguments": {...}}`` naming an offered tool becomes a tool call.

Menus (``decode="auto"``, the default): when the environment offers its action space as a
list of replies (:attr:`PolicyInput.choices`), the policy scores each reply's tokens (and
its end-of-turn token) under the model, one batched forward pass, and samples a reply from
the softmax of those sequence log-probabilities (divided by the temperature): the way
GLAM (Carta et al., 2023) grounds an LLM policy in a discrete action space for online RL.
It records the chosen reply's token ids and their per-token log-probs, exactly what the
trainer recomputes, so rollout and training agree on what the policy did; every reply
offered is valid, and learning moves the probability of the commands themselves (not of
a menu position). ``decode="free"`` always generates.

Lanes: on a CPU, ``lanes`` > 1 scores that many menus at once, each call on one torch
thread (it sets the process's torch threads to 1): two calls on one thread each score
1.45x the menus per second of one call on two threads (SmolLM2, 115-token prompts, 2
cores; ``bench/policy_lanes.py``). Generation stays one call at a time, seeded per step.

Hot reload: :meth:`HFLocalPolicy.reload` loads the announced checkpoint directory (a
``save_pretrained`` folder), checking its ``model.safetensors`` against the announced
SHA-256, and adopts the announced version.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from ...infra.models import chat_ids
from ...schemas import Action, ChatMessage, FunctionCall, PolicyVersion, ToolCall
from .base import Policy, PolicyError, PolicyInput, PolicyOutput

_CALL = re.compile(r"\{.*\}", re.DOTALL)
DECODES = ("auto", "free")
"""auto: choose among the environment's offered replies when it offers some, else generate;
free: always generate."""


def checkpoint_sha256(path: str | Path) -> str:
    """SHA-256 of a checkpoint: of the file itself, or of a folder's ``model.safetensors``."""
    path = Path(path)
    weights = path / "model.safetensors" if path.is_dir() else path
    if not weights.is_file():
        raise PolicyError(f"{path}: no model.safetensors to verify; save with save_pretrained")
    digest = hashlib.sha256()
    with weights.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def build_tiny_checkpoint(directory: str | Path, seed: int = 0) -> Path:
    """Write a tiny random-init Llama and a byte-level tokenizer built in code to
    ``directory`` (for tests and smoke runs; nothing is downloaded)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM

    directory = Path(directory)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    specials = ["<|pad|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>"]
    vocab = {tok: i for i, tok in enumerate([*specials, *sorted(alphabet)])}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(specials)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|eos|>", pad_token="<|pad|>"
    )
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        eos_token_id=1,
        pad_token_id=0,
        bos_token_id=None,
    )
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def render(messages: list[ChatMessage], tool_names: list[str]) -> str:
    """The plain chat template the local policy is prompted with."""
    lines = []
    if tool_names:
        lines.append(f"<|system|>tools: {', '.join(tool_names)}")
    for m in messages:
        content = m.content if isinstance(m.content, str) else json.dumps(m.content)
        if m.tool_calls:
            content = (content or "") + json.dumps([c.function.model_dump() for c in m.tool_calls])
        lines.append(f"<|{m.role if m.role != 'developer' else 'system'}|>{content or ''}")
    lines.append("<|assistant|>")
    return "\n".join(lines)


class HFLocalPolicy(Policy):
    """A causal LM on this machine; see the module docstring."""

    def __init__(
        self,
        checkpoint: str | Path,
        *,
        version: int = 0,
        max_new_tokens: int = 32,
        temperature: float = 1.0,
        max_prompt_tokens: int = 1024,
        device: str = "cpu",
        name: str = "hf-local",
        decode: str = "auto",
        lanes: int = 1,
    ) -> None:
        if decode not in DECODES:
            raise PolicyError(f"decode={decode!r}: use one of {', '.join(DECODES)}")
        self.name, self.version, self.decode = name, version, decode
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.max_prompt_tokens, self.device = max_prompt_tokens, device
        self.tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
        self.model = self._load(checkpoint)
        self.lanes = lanes if device == "cpu" else 1
        """Menus scored at once (see the module docstring)."""
        if self.lanes > 1:
            torch.set_num_threads(1)
        self._lanes = asyncio.Semaphore(self.lanes)
        self._generating = asyncio.Lock()

    def _load(self, checkpoint: str | Path) -> Any:
        model = AutoModelForCausalLM.from_pretrained(str(checkpoint))
        return model.to(self.device).eval()

    async def reload(self, announcement: PolicyVersion) -> None:
        actual = checkpoint_sha256(announcement.uri)
        if actual != announcement.sha256:
            raise PolicyError(
                f"{announcement.uri}: sha256 {actual} does not match the announced "
                f"{announcement.sha256} (version {announcement.policy_version})"
            )
        model = await asyncio.to_thread(self._load, announcement.uri)
        self.model, self.version = model, announcement.policy_version

    def prompt_ids(self, messages: list[ChatMessage], tool_names: list[str]) -> list[int]:
        """Token ids of the prompt: by the checkpoint's own chat template when its tokenizer
        has one (a trainer-published version does, so rollout and training tokenise alike),
        else by the plain :func:`render` template."""
        if getattr(self.tokenizer, "chat_template", None):
            dicts = [m.model_dump(exclude_none=True) for m in messages]
            ids = chat_ids(self.tokenizer, dicts, add_generation_prompt=True)
        else:
            ids = self.tokenizer(render(messages, tool_names))["input_ids"]
        return list(ids)[-self.max_prompt_tokens :]

    async def act(self, inp: PolicyInput) -> PolicyOutput:
        names = [t.function["name"] for t in inp.tools]
        choose = self.decode == "auto" and bool(inp.choices)
        model, version = self.model, self.version  # read together: a reload sets both at once
        ids = self.prompt_ids(inp.messages, names)
        if choose:
            async with self._lanes:
                out_ids, logprobs = await asyncio.to_thread(
                    self._choose, model, ids, inp.choices, inp.seed, inp.step_index
                )
        else:
            async with self._generating:
                out_ids, logprobs = await asyncio.to_thread(
                    self._generate, model, ids, inp.seed, inp.step_index
                )
        text = self.tokenizer.decode(out_ids, skip_special_tokens=True)
        action = _parse(text, names, inp.step_index)
        calls = [action.tool_call] if action.tool_call else None
        message = ChatMessage(role="assistant", content=action.text, tool_calls=calls)
        return PolicyOutput(
            action=action,
            message=message,
            token_ids=out_ids,
            logprobs=logprobs,
            prompt_token_ids=ids,
            info={"policy_version": version},
        )

    def _choose(
        self, model: Any, ids: list[int], choices: list[str], seed: int, step: int
    ) -> tuple[list[int], list[float]]:
        """Sample one of ``choices`` by its sequence log-probability (see the module doc)."""
        tails, token_logprobs = self.choice_logprobs(ids, choices, model)
        scores = torch.tensor([sum(lp) for lp in token_logprobs]) / self.temperature
        generator = torch.Generator().manual_seed(_seed(seed, step))
        k = int(torch.multinomial(torch.softmax(scores, 0), 1, generator=generator))
        return tails[k], token_logprobs[k]

    def menu_distribution(self, ids: list[int], choices: list[str]) -> list[float]:
        """The probability this policy picks each of ``choices`` after prompt ``ids`` (what
        :meth:`act` samples from; exact, for measuring without sampling noise)."""
        _, token_logprobs = self.choice_logprobs(ids, choices)
        scores = torch.tensor([sum(lp) for lp in token_logprobs]) / self.temperature
        return torch.softmax(scores, 0).tolist()

    def choice_logprobs(
        self, ids: list[int], choices: list[str], model: Any = None
    ) -> tuple[list[list[int]], list[list[float]]]:
        """Each choice's tokens (its text and the end token) and their log-probabilities
        after prompt ``ids`` under ``model`` (default: the current one). The prompt runs
        once, the output head on its last position only; its key-value cache is repeated
        for every choice, so the cost is one prompt plus the choices' own tokens."""
        model = model or self.model
        end = self.tokenizer.eos_token_id
        tails = [
            [
                *self.tokenizer(c, add_special_tokens=False)["input_ids"],
                *([end] if end is not None else []),
            ]
            for c in choices
        ]
        width, pad = max(len(t) for t in tails), int(self.tokenizer.pad_token_id or 0)
        rows = torch.tensor([[*t, *[pad] * (width - len(t))] for t in tails], device=self.device)
        mask = torch.tensor(
            [[1] * (len(ids) + len(t)) + [0] * (width - len(t)) for t in tails], device=self.device
        )
        positions = torch.arange(len(ids), len(ids) + width, device=self.device)
        with torch.inference_mode():
            prompt = model(
                input_ids=torch.tensor([ids], device=self.device), use_cache=True, logits_to_keep=1
            )
            cache = prompt.past_key_values
            cache.batch_repeat_interleave(len(tails))
            logits = model(
                input_ids=rows,
                attention_mask=mask,
                past_key_values=cache,
                position_ids=positions.expand(len(tails), -1),
            ).logits.float()
            first = torch.log_softmax(prompt.logits[0, -1].float(), -1)
            rest = torch.log_softmax(logits[:, :-1], -1).gather(-1, rows[:, 1:, None])[..., 0]
        token_logprobs = [
            [float(first[t[0]]), *rest[i, : len(t) - 1].tolist()] for i, t in enumerate(tails)
        ]
        return tails, token_logprobs

    def _generate(
        self, model: Any, ids: list[int], seed: int, step: int
    ) -> tuple[list[int], list[float]]:
        torch.manual_seed(_seed(seed, step))
        inputs = torch.tensor([ids], device=self.device)
        with torch.no_grad():
            gen = model.generate(
                inputs,
                attention_mask=torch.ones_like(inputs),
                do_sample=True,
                temperature=self.temperature,
                top_k=0,
                top_p=1.0,
                max_new_tokens=self.max_new_tokens,
                output_scores=True,
                return_dict_in_generate=True,
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self.tokenizer.eos_token_id,
            )
            scores = model.compute_transition_scores(
                gen.sequences, gen.scores, normalize_logits=True
            )
        out_ids = gen.sequences[0, len(ids) :].tolist()
        return out_ids, scores[0, : len(out_ids)].tolist()


def _seed(seed: int, step: int) -> int:
    return hash((seed, step)) & 0x7FFFFFFF


def _parse(text: str, tool_names: list[str], step: int) -> Action:
    match = _CALL.search(text)
    if match:
        try:
            call = json.loads(match.group(0))
        except json.JSONDecodeError:
            call = None
        if isinstance(call, dict) and call.get("name") in tool_names:
            args = call.get("arguments", {})
            return Action(
                tool_call=ToolCall(
                    id=f"call_{step}",
                    function=FunctionCall(
                        name=call["name"],
                        arguments=json.dumps(args if isinstance(args, dict) else {}),
                    ),
                )
            )
    return Action(text=text)
