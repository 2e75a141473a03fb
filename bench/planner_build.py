"""The planner build's step, timed side by side on the same batches: the model's own loss
(logits at every position) against :func:`answer_loss` (the head only where an answer token
is predicted), and how many lower blocks are frozen (``python bench/planner_build.py``).

Prints the tokens of a batch (prompt, answer, padding), seconds a step for each variant
(median of ``--steps`` after one warm-up step) and the two losses' difference on the
same weights, then what the full build (``Recipe.steps``) would take with each variant.
"""

from __future__ import annotations

import argparse
import copy
import random
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from safactory.infra.compute import cpu_class
from safactory.infra.models import ensure_smollm2
from safactory.sinks.dataelf.corpus import pairs
from safactory.sinks.dataelf.tuning import Recipe, _batches, answer_loss, tensors, user_ids


def _model_loss(model, ids, mask, labels):
    return model(input_ids=ids, attention_mask=mask, labels=labels).loss


def _time(base, batches, frozen: int, loss_fn, lr: float) -> list[float]:
    model = copy.deepcopy(base)
    model.get_input_embeddings().weight.requires_grad_(False)
    for block in model.model.layers[:frozen]:
        block.requires_grad_(False)
    model.train()
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=lr, weight_decay=0.0)
    seconds = []
    for ids, mask, labels in batches:
        start = time.perf_counter()
        loss = loss_fn(model, ids, mask, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        seconds.append(time.perf_counter() - start)
    return seconds[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--frozen", type=int, nargs="+", default=[15, 20, 24])
    args = parser.parse_args()
    recipe = Recipe()
    torch.manual_seed(0)
    torch.set_num_threads(recipe.threads)
    base_dir = ensure_smollm2()
    tokenizer = AutoTokenizer.from_pretrained(base_dir, local_files_only=True)
    base = AutoModelForCausalLM.from_pretrained(
        base_dir, local_files_only=True, dtype=torch.float32
    )
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    examples = []
    for pair in pairs(recipe.pairs, seed=recipe.seed):
        prompt = user_ids(tokenizer, pair.intent)
        answer = [*tokenizer(pair.answer(), add_special_tokens=False).input_ids, end]
        examples.append((prompt + answer, len(prompt)))
    chosen = _batches(examples, recipe.batch, random.Random(recipe.seed))[: args.steps + 1]
    batches = [tensors(b, tokenizer.pad_token_id) for b in chosen]
    prompt = sum(p for b in chosen for _, p in b)
    answer = sum(len(s) - p for b in chosen for s, p in b)
    padded = sum(ids.numel() for ids, _, _ in batches)
    n = len(chosen)
    print(
        f"cpu {cpu_class()['class']}; a batch of {recipe.batch}: prompt {prompt / n:.0f}, "
        f"answer {answer / n:.0f}, padding {(padded - prompt - answer) / n:.0f} tokens"
    )
    with torch.no_grad():
        ids, mask, labels = batches[0]
        a, b = _model_loss(base, ids, mask, labels), answer_loss(base, ids, mask, labels)
    print(f"loss: the model's {a.item():.5f}, answer_loss {b.item():.5f}")
    rows = [("model loss", 15, _model_loss)]
    rows += [("answer loss", f, answer_loss) for f in args.frozen]
    for name, frozen, fn in rows:
        s = statistics.median(_time(base, batches, frozen, fn, recipe.lr))
        print(
            f"{name:12s} frozen {frozen:2d}: {s:.2f} s a step, "
            f"{s * recipe.steps / 60:.1f} min for {recipe.steps} steps"
        )


if __name__ == "__main__":
    main()
