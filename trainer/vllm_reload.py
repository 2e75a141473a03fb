"""Drive a weight reload on a running vLLM server when a version is published.

Selected by ``[trainer.vllm] enabled = true``; nothing here imports vLLM. The server is
started on the weight store's ``current`` symlink, which the trainer repoints at each
published version, with the development endpoints on::

    VLLM_SERVER_DEV_MODE=1 vllm serve <weight_dir>/<policy>/current

and the reload asks every worker to reload its weights from that path
(``POST /collective_rpc {"method": "reload_weights"}``). Not exercised by the test suite:
it needs a GPU and a vLLM server.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request

from .config import VllmConfig
from .weights import StoredWeights


class VllmServerReloader:
    """Asks a vLLM server to reload weights after the trainer repointed ``current``."""

    def __init__(self, config: VllmConfig) -> None:
        self.config = config

    async def reload(self, stored: StoredWeights) -> None:
        """Reload ``stored`` on the server (raises on an HTTP error, naming the URL)."""
        await asyncio.to_thread(self._post, stored)

    def _post(self, stored: StoredWeights) -> None:
        url = self.config.base_url.rstrip("/") + "/collective_rpc"
        body = json.dumps({"method": "reload_weights"}).encode()
        request = urllib.request.Request(
            url, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.config.timeout_s) as response:
                response.read()
        except OSError as exc:
            raise RuntimeError(
                f"vLLM reload of version {stored.version} via {url} failed ({exc}); is the "
                "server up with VLLM_SERVER_DEV_MODE=1 and serving the store's 'current'?"
            ) from exc
