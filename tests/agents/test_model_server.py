"""The project's own model server (in process, over its HTTP app): it serves nothing until a
reload succeeds, reports the revision it loaded, stamps replies with it, and a reload that
fails (refused, or weights that are not what their revision says) keeps the old weights."""

from __future__ import annotations

import os
from pathlib import Path

from fastapi.testclient import TestClient

from safactory.agents.policies.hf_local import build_tiny_checkpoint, checkpoint_sha256
from safactory.agents.policies.serve_local import ModelServer
from safactory.schemas.serving import REVISION_FILE, ServedRevision, version_of_fingerprint


def _version(root: Path, version: int, seed: int) -> Path:
    folder = build_tiny_checkpoint(root / f"v{version:06d}", seed=seed)
    revision = ServedRevision(
        policy_name="tiny", policy_version=version, sha256=checkpoint_sha256(folder)
    )
    (folder / REVISION_FILE).write_text(revision.model_dump_json())
    return folder


def _point(current: Path, folder: Path) -> None:
    link = current.with_name("current.tmp")
    link.unlink(missing_ok=True)
    link.symlink_to(folder.name)
    os.replace(link, current)


def _served(client: TestClient) -> int | None:
    data = client.get("/v1/models").json()["data"]
    return data[0]["sf_revision"]["policy_version"] if data else None


def test_the_server_reports_and_stamps_what_it_loaded_and_keeps_it_on_failure(
    tmp_path: Path,
) -> None:
    current = tmp_path / "current"
    server = ModelServer(current, name="tiny", max_new_tokens=3)
    chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "seed": 1}
    token = "t" * 24  # the reload drill needs the server's token
    headers = {"Authorization": f"Bearer {token}"}
    with TestClient(server.app(token), base_url="http://127.0.0.1", headers=headers) as client:
        assert _served(client) is None
        assert client.post("/v1/chat/completions", json=chat).status_code == 503

        _point(current, _version(tmp_path, 0, seed=0))
        reloaded = client.post("/collective_rpc", json={"method": "reload_weights"})
        assert reloaded.status_code == 200 and reloaded.json()["results"][0]["policy_version"] == 0
        reply = client.post(
            "/v1/chat/completions",
            json={**chat, "logprobs": True, "return_tokens_as_token_ids": True},
        ).json()
        assert version_of_fingerprint(reply["system_fingerprint"]) == 0
        tokens = reply["choices"][0]["logprobs"]["content"]
        assert tokens and all(t["token"].startswith("token_id:") for t in tokens)

        _point(current, _version(tmp_path, 1, seed=1))
        client.post("/v1/admin/fail_reloads", json={"count": 1})
        refused = client.post("/collective_rpc", json={"method": "reload_weights"})
        assert refused.status_code == 500 and "refused" in refused.json()["error"]["message"]
        assert _served(client) == 0  # the old weights still serve

        broken = _version(tmp_path, 2, seed=2)
        (broken / REVISION_FILE).write_text(
            ServedRevision(policy_name="tiny", policy_version=2, sha256="0" * 64).model_dump_json()
        )
        _point(current, broken)
        mismatch = client.post("/collective_rpc", json={"method": "reload_weights"})
        assert mismatch.status_code == 500 and "sha256" in mismatch.json()["error"]["message"]
        assert _served(client) == 0

        _point(current, tmp_path / "v000001")
        assert client.post("/collective_rpc", json={"method": "reload_weights"}).status_code == 200
        assert _served(client) == 1
        reply = client.post("/v1/chat/completions", json=chat).json()
        assert version_of_fingerprint(reply["system_fingerprint"]) == 1
        assert (server.reloads, server.failed_reloads) == (2, 3)  # the start found nothing


def test_a_plain_hugging_face_folder_is_served_as_the_version_given(tmp_path: Path) -> None:
    folder = build_tiny_checkpoint(tmp_path / "hf", seed=3)  # no revision.json
    refused = ModelServer(folder, name="tiny")
    with TestClient(refused.app(), base_url="http://127.0.0.1") as client:
        assert _served(client) is None  # a weight store's folder or a version is needed
    server = ModelServer(folder, name="tiny", version=7)
    with TestClient(server.app(), base_url="http://127.0.0.1") as client:
        assert _served(client) == 7
        chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "seed": 1}
        reply = client.post("/v1/chat/completions", json=chat).json()
        assert version_of_fingerprint(reply["system_fingerprint"]) == 7
    assert server.revision is not None
    assert server.revision.sha256 == checkpoint_sha256(folder)
