"""The embedded planner's weights: SmolLM2-135M-Instruct fine-tuned on the generated corpus
(:mod:`.corpus`) to write a plan's JSON, or a question back, for a request.

One command builds them from nothing on the CPU and caches them beside the base model
(``$SF_MODELS/dataelf-planner``, rebuilt when the corpus or the recipe changes)::

    python -m safactory.sinks.dataelf.tuning      # 20-45 min on 2 cores, by CPU

``safactory data ask`` builds them on first use. The recipe is fixed and seeded: the same
corpus, the same order of batches, the same initial weights.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ...infra.compute import native_bf16

PLANNER = "dataelf-planner"
STAMP = "recipe.json"


@dataclass(frozen=True)
class Recipe:
    """How the weights are made; its digest (with the corpus code's) names a build."""

    pairs: int = 5760
    steps: int = 360
    batch: int = 16
    lr: float = 2e-4
    warmup: int = 10
    frozen_layers: int = 15
    """The lower blocks kept as they are (and the embeddings): half the backward pass."""
    bf16: bool = field(default_factory=native_bf16)
    """bfloat16 autocast, only where the CPU computes it natively (AVX512_BF16 or AMX halve
    a step there; elsewhere autocast emulates it 5-6x slower than float32). The weights stay
    float32 either way; the choice is part of the digest, so each kind of CPU builds its own."""
    seed: int = 0
    threads: int = 2


def user_ids(tokenizer: Any, intent: str) -> list[int]:
    """The prompt the planner reads: the request as a chat user turn, then the assistant's
    turn opened (no system message: the fine-tuned model needs no catalogue)."""
    text = f"<|im_start|>user\n{intent}<|im_end|>\n<|im_start|>assistant\n"
    return tokenizer(text, add_special_tokens=False).input_ids


def digest(recipe: Recipe) -> str:
    """The build's identity: the recipe, this module's code and the corpus it trains on (a
    change of wording or of a plan rebuilds; a change elsewhere does not)."""
    from .corpus import pairs

    h = hashlib.sha256(json.dumps(asdict(recipe), sort_keys=True).encode())
    h.update(Path(__file__).read_bytes())
    for pair in pairs(recipe.pairs, seed=recipe.seed):
        h.update(json.dumps([pair.intent, pair.steps, pair.ask]).encode())
    return h.hexdigest()[:16]


def planner_dir() -> Path:
    from ...infra.models import models_dir

    return models_dir() / PLANNER


def ensure_planner(recipe: Recipe = Recipe(), *, progress: bool = True) -> Path:
    """The fine-tuned planner's folder, built first when missing or made by another recipe."""
    target = planner_dir()
    stamp = target / STAMP
    want = digest(recipe)
    if stamp.is_file() and json.loads(stamp.read_text()).get("digest") == want:
        return target
    if progress:
        print(
            f"building DataElf's planner in {target} (once; 20-45 min on 2 cores, by CPU)",
            file=sys.stderr,
        )
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    build(tmp, recipe, progress=progress)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    return target


def build(out: Path, recipe: Recipe, *, progress: bool = True) -> dict[str, Any]:
    """Fine-tune SmolLM2 on ``recipe.pairs`` train pairs for ``recipe.steps`` steps and save
    it (safetensors, tokenizer, ``recipe.json``) in ``out``; the loss curve is returned."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ...infra.models import ensure_smollm2
    from .corpus import pairs

    torch.manual_seed(recipe.seed)
    torch.set_num_threads(recipe.threads)
    base = ensure_smollm2(progress=progress)
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(base, local_files_only=True, dtype=torch.float32)
    model.get_input_embeddings().weight.requires_grad_(False)  # tied to the output head
    for block in model.model.layers[: recipe.frozen_layers]:
        block.requires_grad_(False)
    model.train()
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    examples = []
    for pair in pairs(recipe.pairs, seed=recipe.seed):
        prompt = user_ids(tokenizer, pair.intent)
        answer = [*tokenizer(pair.answer(), add_special_tokens=False).input_ids, end]
        examples.append((prompt + answer, len(prompt)))
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=recipe.lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: min(1.0, (s + 1) / recipe.warmup) * max(0.0, 1 - s / recipe.steps),
    )
    rng = random.Random(recipe.seed)
    batches: list[list[tuple[list[int], int]]] = []
    losses = []
    start = time.perf_counter()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else end
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=recipe.bf16)
    for step in range(recipe.steps):
        if not batches:
            batches = _batches(examples, recipe.batch, rng)
        ids, mask, labels = tensors(batches.pop(), pad)
        with autocast:
            loss = answer_loss(model, ids, mask, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(round(loss.item(), 4))
        if progress and (step % 10 == 0 or step == recipe.steps - 1):
            elapsed = time.perf_counter() - start
            left = elapsed / (step + 1) * (recipe.steps - step - 1)
            print(
                f"  step {step + 1}/{recipe.steps}  loss {loss.item():.3f}  {elapsed:.0f} s"
                f"  (about {left / 60:.0f} min left)",
                file=sys.stderr,
            )
    model.eval()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    report = {
        "digest": digest(recipe),
        "recipe": asdict(recipe),
        "seconds": round(time.perf_counter() - start, 1),
        "losses": losses,
    }
    (out / STAMP).write_text(json.dumps(report, indent=1))
    return report


def tensors(batch: list[tuple[list[int], int]], pad: int) -> tuple[Any, Any, Any]:
    """A batch as padded token ids, attention mask and labels (-100 outside the answers)."""
    import torch

    width = max(len(ids) for ids, _ in batch)
    ids = torch.full((len(batch), width), pad)
    labels = torch.full((len(batch), width), -100)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (seq, prompt_len) in enumerate(batch):
        ids[row, : len(seq)] = torch.tensor(seq)
        labels[row, prompt_len : len(seq)] = torch.tensor(seq[prompt_len:])
        mask[row, : len(seq)] = 1
    return ids, mask, labels


def answer_loss(model: Any, ids: Any, mask: Any, labels: Any) -> Any:
    """The causal LM loss of the answers, the output head run only where an answer token is
    predicted: the same value as the model's own loss, without the vocabulary-wide logits of
    every prompt and padding position (the head is a quarter of the model's compute)."""
    import torch

    hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
    target = labels[:, 1:]
    keep = target != -100
    logits = model.lm_head(hidden[:, :-1][keep])
    return torch.nn.functional.cross_entropy(logits.float(), target[keep])


def _batches(
    examples: list[tuple[list[int], int]], size: int, rng: random.Random
) -> list[list[tuple[list[int], int]]]:
    """One epoch in batches of similar lengths (little padding), in random order."""
    order = list(range(len(examples)))
    rng.shuffle(order)
    out = []
    for start in range(0, len(order), size * 8):  # sort within windows of 8 batches
        window = sorted(order[start : start + size * 8], key=lambda i: len(examples[i][0]))
        out += [[examples[i] for i in window[j : j + size]] for j in range(0, len(window), size)]
    rng.shuffle(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description="build DataElf's planner weights")
    parser.add_argument("--out", type=Path, help="build here instead of the models folder")
    for name, value in asdict(Recipe()).items():
        if isinstance(value, bool):
            parser.add_argument(f"--{name}", action=argparse.BooleanOptionalAction, default=value)
        else:
            parser.add_argument(f"--{name}", type=type(value), default=value)
    args = parser.parse_args()
    recipe = Recipe(**{k: getattr(args, k) for k in asdict(Recipe())})
    if args.out:
        report = build(args.out, recipe)
        print(f"built {args.out} in {report['seconds']} s")
    else:
        print(ensure_planner(recipe))


if __name__ == "__main__":
    main()
