"""What an inference server says it serves: the contract between model servers, the trainer
that asks them to reload, and the remote policies that stamp steps with a version.

A version in ``sf-policy-version`` must be the version that produced the action (DESIGN,
"Scale-out"). For a remote policy only the server knows that, so a server that speaks this
contract reports a :class:`ServedRevision`:

- in ``GET /v1/models``, each model object carries it under :data:`MODELS_FIELD`;
- the reload endpoint answers with it once the new weights are in place;
- every chat completion carries it, compressed, in OpenAI's own ``system_fingerprint``
  (:meth:`ServedRevision.fingerprint`), so a reply names the weights that wrote it even when
  a reload happened between two requests.

The weight store writes the same record next to each version's weights
(:data:`REVISION_FILE`), so a server learns what it loaded from the files it loaded.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt

REVISION_FILE = "revision.json"
"""In a weight-store version directory: the :class:`ServedRevision` of those weights."""
MODELS_FIELD = "sf_revision"
"""Key of the revision in a ``/v1/models`` model object."""
_FINGERPRINT = re.compile(r"^sf-v(?P<version>\d+)-(?P<sha>[0-9a-f]{12})$")


class ServedRevision(BaseModel):
    """One version of a policy's weights, as a server reports having loaded it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    policy_name: str = Field(min_length=1, max_length=128)
    policy_version: NonNegativeInt
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="of model.safetensors")

    def fingerprint(self) -> str:
        """The ``system_fingerprint`` of completions written by these weights."""
        return f"sf-v{self.policy_version}-{self.sha256[:12]}"

    def matches(self, version: int, sha256: str) -> bool:
        """Whether this is ``version`` with weights of digest ``sha256``."""
        return self.policy_version == version and self.sha256 == sha256


def version_of_fingerprint(fingerprint: object) -> int | None:
    """The policy version a completion's ``system_fingerprint`` names, or None when the
    server did not stamp one of ours (vLLM, a hosted API)."""
    match = _FINGERPRINT.match(fingerprint) if isinstance(fingerprint, str) else None
    return int(match["version"]) if match else None
