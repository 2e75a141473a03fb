"""Full fine-tuning vs LoRA for SmolLM2-135M on this CPU: seconds per update, what it learns.

The same rollouts for both: training chores of the choice environment with shuffled menus,
the policy choosing a command by the model's sequence probabilities (the demo's
``--decode auto``), one REINFORCE update with group-relative advantages per round of
25 episodes. Held-out chores are scored before and after by the policy's exact probability
mass on destructive commands (P(unsafe), no sampling noise). Needs ``peft``
(``pip install peft``; not a project dependency: the trainer fine-tunes fully).

    python bench/lora_vs_full.py full:5e-5 lora:5e-4 full:1e-4
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from safactory.agents.env import TaskSpec
from safactory.agents.envs.choice_env import ChoiceEnv, MenuEntry, choice_suite
from safactory.infra.models import chat_ids, resolve_model

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def episode(tokenizer: object, task: TaskSpec, seed: int) -> tuple[list[int], list[MenuEntry]]:
    """Prompt ids and the (shuffled) menu of one episode."""
    env = ChoiceEnv()
    reset = env.reset(task, seed=seed)
    dicts = [m.model_dump(exclude_none=True) for m in reset.prompt]
    return chat_ids(tokenizer, dicts, add_generation_prompt=True), env.menu  # type: ignore[arg-type]


@torch.no_grad()
def menu_probs(
    model: torch.nn.Module, tokenizer: object, ids: list[int], menu: list[MenuEntry]
) -> tuple[torch.Tensor, list[list[int]]]:
    """The policy's probability of each command, and each command's tokens (+ end)."""
    end = tokenizer.eos_token_id  # type: ignore[attr-defined]
    tails = [tokenizer(e.command, add_special_tokens=False)["input_ids"] + [end] for e in menu]  # type: ignore[operator]
    width = max(len(ids) + len(t) for t in tails)
    rows = torch.tensor([ids + t + [end] * (width - len(ids) - len(t)) for t in tails])
    logp = torch.log_softmax(model(input_ids=rows).logits[:, :-1].float(), -1)
    picked = logp.gather(-1, rows[:, 1:, None])[..., 0]
    scores = torch.tensor(
        [float(picked[i, len(ids) - 1 : len(ids) - 1 + len(t)].sum()) for i, t in enumerate(tails)]
    )
    return torch.softmax(scores, 0), tails


def p_unsafe(model: torch.nn.Module, tokenizer: object, tasks: list[TaskSpec], n: int) -> float:
    """Mean probability mass on destructive commands over ``n`` seeds of each task."""
    model.eval()
    out = []
    for i, task in enumerate(tasks):
        for k in range(n):
            ids, menu = episode(tokenizer, task, 10_000 + 10 * i + k)
            probs, _ = menu_probs(model, tokenizer, ids, menu)
            out.append(float(sum(probs[j] for j, e in enumerate(menu) if e.destroys)))
    return statistics.fmean(out)


def run(mode: str, lr: float, updates: int, per_chore: int) -> None:
    """One configuration: updates on training chores, held-out P(unsafe) before/after."""
    folder = resolve_model("smollm2-135m")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    if mode == "lora":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=LORA_TARGETS)
        )
    suite = [t.model_copy(update={"params": {**t.params, "shuffle": True}}) for t in choice_suite()]
    train = [t for t in suite if t.params["split"] == "train"]
    held = [t for t in suite if t.params["split"] == "heldout"]
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr)
    end = tokenizer.eos_token_id
    before = p_unsafe(model, tokenizer, held, 8)
    seconds = []
    for u in range(updates):
        model.eval()
        batch = []
        for i, task in enumerate(train):
            for k in range(per_chore):
                seed = 1000 * u + 10 * i + k
                ids, menu = episode(tokenizer, task, seed)
                probs, tails = menu_probs(model, tokenizer, ids, menu)
                j = int(torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(seed)))
                reward = -1.0 if menu[j].destroys else 1.0 if menu[j].does_job else 0.0
                batch.append((i, ids, tails[j], reward))
        advantages = []
        for item in batch:
            group = [other[3] for other in batch if other[0] == item[0]]
            spread = statistics.pstdev(group)
            advantages.append((item[3] - statistics.fmean(group)) / spread if spread else 0.0)
        model.train()
        optimizer.zero_grad()
        started = time.perf_counter()
        policy_tokens = sum(len(item[2]) for item in batch)
        for at in range(0, len(batch), 8):
            chunk = batch[at : at + 8]
            seqs = [item[1] + item[2] for item in chunk]
            width = max(map(len, seqs))
            rows = torch.tensor([q + [end] * (width - len(q)) for q in seqs])
            attention = torch.tensor([[1] * len(q) + [0] * (width - len(q)) for q in seqs])
            mask, adv = torch.zeros(rows.shape), torch.zeros(rows.shape)
            for j, item in enumerate(chunk):
                mask[j, len(item[1]) : len(item[1]) + len(item[2])] = 1
                adv[j] = advantages[at + j]
            logits = model(input_ids=rows, attention_mask=attention).logits[:, :-1].float()
            logp = torch.log_softmax(logits, -1).gather(-1, rows[:, 1:, None])[..., 0]
            (-(logp * adv[:, 1:] * mask[:, 1:]).sum() / policy_tokens).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        seconds.append(time.perf_counter() - started)
    after = p_unsafe(model, tokenizer, held, 8)
    trainable = sum(p.numel() for p in params) / 1e6
    print(
        f"{mode:5s} lr={lr:g} trainable={trainable:.1f}M  update s: "
        f"{statistics.fmean(seconds):.1f} (min {min(seconds):.1f})  held-out P(unsafe) "
        f"{before:.2f} -> {after:.2f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("configs", nargs="+", help="mode:lr, mode full or lora")
    parser.add_argument("--updates", type=int, default=4)
    parser.add_argument("--per-chore", type=int, default=5, help="episodes per chore per update")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for config in args.configs:
        mode, _, lr = config.partition(":")
        if mode not in ("full", "lora") or not lr:
            parser.error(f"{config!r}: write full:LR or lora:LR, e.g. lora:5e-4")
        run(mode, float(lr), args.updates, args.per_chore)


if __name__ == "__main__":
    main()
