"""Have the inference server load a published version, and confirm it did, before announcing.

Selected by ``[trainer.vllm] enabled = true``; nothing here imports vLLM. The server is
started on the weight store's ``current`` symlink, which the trainer repoints at each
published version: vLLM with its development endpoints on::

    VLLM_SERVER_DEV_MODE=1 vllm serve <weight_dir>/<policy>/current

or the project's own server (``safactory model-server <weight_dir>/<policy>/current``). The
reload asks the server to reload its weights from that path (``POST /collective_rpc
{"method": "reload_weights"}``, vLLM's endpoint, which ours speaks too), then confirms:

- ``confirm = "revision"`` (default): ``GET /v1/models`` must report the revision just
  published (:mod:`safactory.schemas.serving`; ours does, vLLM does not);
- ``confirm = "ack"``: the reload call's success is the confirmation (vLLM answers once
  every worker has reloaded).

Only a confirmed version is announced (:class:`~safactory.trainer.stream.StreamingTrainer`);
a failed reload leaves the old version in force and is counted.
"""

from __future__ import annotations

import os

import httpx

from ..schemas.serving import MODELS_FIELD, ServedRevision
from .config import VllmConfig
from .weights import StoredWeights


class ReloadError(RuntimeError):
    """The server did not confirm serving the version; the message says what it did."""


class VllmServerReloader:
    """Asks the inference server to reload ``current`` and confirms what it then serves."""

    def __init__(self, config: VllmConfig) -> None:
        self.config = config
        self.base_url = config.base_url.rstrip("/")
        token = config.token or os.environ.get("SF_MODEL_SERVER_TOKEN")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    async def reload(self, stored: StoredWeights) -> None:
        """Reload ``stored`` on the server; :class:`ReloadError` unless it is confirmed."""
        async with httpx.AsyncClient(timeout=self.config.timeout_s, headers=self.headers) as client:
            url = f"{self.base_url}/collective_rpc"
            try:
                response = await client.post(url, json={"method": "reload_weights"})
            except httpx.HTTPError as exc:
                raise ReloadError(
                    f"reload of version {stored.version} via {url} failed ({exc!r}); is the "
                    "server up (vLLM with VLLM_SERVER_DEV_MODE=1) and serving the store's "
                    "'current'?"
                ) from exc
            if response.status_code != 200:
                raise ReloadError(
                    f"reload of version {stored.version} via {url}: HTTP "
                    f"{response.status_code}: {response.text[:300]}"
                )
            if self.config.confirm == "ack":
                return
            served = await self._served(client)
        if served is None:
            raise ReloadError(
                f"{self.base_url}/v1/models reports no served revision after the reload of "
                f"version {stored.version}; a server that cannot say what it serves needs "
                "[trainer.vllm] confirm = 'ack'"
            )
        if not served.matches(stored.version, stored.sha256):
            raise ReloadError(
                f"after the reload of version {stored.version} ({stored.sha256[:12]}) the "
                f"server serves version {served.policy_version} ({served.sha256[:12]})"
            )

    async def _served(self, client: httpx.AsyncClient) -> ServedRevision | None:
        url = f"{self.base_url}/v1/models"
        try:
            response = await client.get(url)
            models = response.json().get("data") or []
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            raise ReloadError(f"{url}: cannot read the served models ({exc!r})") from exc
        for model in models:
            if isinstance(model, dict) and model.get(MODELS_FIELD):
                try:
                    return ServedRevision.model_validate(model[MODELS_FIELD])
                except ValueError as exc:
                    raise ReloadError(f"{url}: malformed {MODELS_FIELD} ({exc})") from exc
        return None
