"""The weight store: one directory per published version, in Hugging Face layout.

``<root>/<policy>/v000042/`` holds ``model.safetensors``, ``config.json`` and the tokenizer,
so a simulation worker (``AutoModelForCausalLM.from_pretrained``) or a vLLM server loads it
without Safactory code. The announced ``sha256`` is that of ``model.safetensors``;
``revision.json`` (:class:`~safactory.schemas.serving.ServedRevision`) names the policy,
version and digest, so a server that loads the folder can report what it serves.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging

from ..schemas.serving import REVISION_FILE, ServedRevision

WEIGHTS_FILE = "model.safetensors"


@dataclass(frozen=True)
class StoredWeights:
    """Where a version's weights are and their digest."""

    version: int
    path: Path
    sha256: str

    @property
    def uri(self) -> str:
        """Absolute path of the version directory (what :class:`PolicyVersion` carries).

        A plain path, which simulation workers open directly; :func:`load_policy` also
        accepts ``file://`` URIs.
        """
        return str(self.path.resolve())


class WeightStore:
    """Saves versions atomically (write to a temporary directory, then rename); with
    ``keep`` > 0, only the ``keep`` newest versions stay on disk."""

    def __init__(self, root: Path, policy_name: str, keep: int = 0) -> None:
        self.root = Path(root) / policy_name
        self.policy_name = policy_name
        self.keep = keep

    def path_of(self, version: int) -> Path:
        """Directory of ``version``."""
        return self.root / f"v{version:06d}"

    def save(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast, version: int
    ) -> StoredWeights:
        """Write ``version`` (replacing a partial or earlier copy) and return its digest."""
        final = self.path_of(version)
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        hf_logging.disable_progress_bar()
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        digest = file_sha256(tmp / WEIGHTS_FILE)
        revision = ServedRevision(
            policy_name=self.policy_name, policy_version=version, sha256=digest
        )
        (tmp / REVISION_FILE).write_text(revision.model_dump_json())
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        self._prune()
        return StoredWeights(version, final, digest)

    def _prune(self) -> None:
        if not self.keep:
            return
        versions = sorted(p for p in self.root.glob("v*") if p.is_dir() and p.name[1:].isdigit())
        for old in versions[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)

    @property
    def current(self) -> Path:
        """Symlink to the newest published version (what a vLLM server is started on)."""
        return self.root / "current"

    def point_current(self, stored: StoredWeights) -> None:
        """Atomically repoint :attr:`current` at ``stored``."""
        link = self.root / "current.tmp"
        link.unlink(missing_ok=True)
        link.symlink_to(stored.path.name, target_is_directory=True)
        os.replace(link, self.current)


def file_sha256(path: Path) -> str:
    """Hex SHA-256 of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def path_from_uri(uri: str) -> Path:
    """Local path of a ``file://`` URI (or a plain path)."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return Path(unquote(parsed.path) if parsed.scheme else uri)
    raise ValueError(f"weight uri {uri!r}: only file:// URIs are supported by the local store")


def load_policy(
    uri: str | Path, sha256: str | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """Load a stored version; verify ``sha256`` first when given."""
    path = path_from_uri(str(uri)) if not isinstance(uri, Path) else uri
    if not (path / WEIGHTS_FILE).is_file():
        raise FileNotFoundError(f"{path}: no {WEIGHTS_FILE} here; expected a weight-store version")
    if sha256 is not None:
        actual = file_sha256(path / WEIGHTS_FILE)
        if actual != sha256:
            raise ValueError(f"{path / WEIGHTS_FILE}: sha256 {actual} != announced {sha256}")
    hf_logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(path, local_files_only=True)
    return model, tokenizer
