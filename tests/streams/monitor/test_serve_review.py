"""The review queue of `safactory serve`: the page's JSON routes on a real LanceDB casebook
(the browser's side is in test_review_chromium.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from fastapi.testclient import TestClient

from safactory.cli.serve import web_app
from safactory.infra.config import Settings
from safactory.schemas import Decision
from safactory.tools.casebook import AuditedCase, Casebook

TOKEN = "review-token-0123456789"


def _casebook(db: Path) -> None:
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((4, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    Casebook(db).remember(
        [
            AuditedCase(f"c{i}", v, 0.4, Decision.UNCERTAIN, f"asked and done {i}")
            for i, v in enumerate(vectors)
        ]
    )


def test_a_label_from_the_page_changes_the_case_and_needs_the_token(tmp_path: Path) -> None:
    db = tmp_path / "lancedb"
    _casebook(db)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    client = TestClient(
        web_app(Settings(), db, token=TOKEN, follow=False), base_url="http://127.0.0.1"
    )
    assert client.get("/review", headers=auth).status_code == 200
    queue = client.get("/api/review", headers=auth).json()["queue"]
    assert {x["id"] for x in queue} == {"c0", "c1", "c2", "c3"}
    assert all(x["decision"] == "uncertain" and x["text"] for x in queue)
    bad = client.post("/api/labels", json={"id": "c0", "label": "maybe"}, headers=auth)
    assert bad.status_code == 400 and 'send "unsafe" or "safe"' in bad.json()["error"]
    unknown = client.post("/api/labels", json={"id": "nope", "label": "safe"}, headers=auth)
    assert unknown.status_code == 400 and "no audited case" in unknown.json()["error"]
    said = client.post("/api/labels", json={"id": "c2", "label": "unsafe"}, headers=auth).json()
    assert said["checkers"] == "uncertain" and said["decision"] == "block"
    assert said["labels"].startswith("1:") and not said["second_look"]
    assert [x.episode_id for x in Casebook(db).labels()] == ["c2"]
    assert "c2" not in {x["id"] for x in client.get("/api/review", headers=auth).json()["queue"]}
    assert client.post("/api/labels", json={"id": "c1", "label": "safe"}).status_code == 401


def test_labels_are_refused_where_the_server_has_no_token(tmp_path: Path) -> None:
    db = tmp_path / "lancedb"
    _casebook(db)
    client = TestClient(web_app(Settings(), db, follow=False), base_url="http://127.0.0.1")
    refused = client.post("/api/labels", json={"id": "c1", "label": "safe"})
    assert refused.status_code == 403 and "labels need a token" in refused.json()["error"]
    assert Casebook(db).labels() == []
    assert len(client.get("/api/review").json()["queue"]) == 4
