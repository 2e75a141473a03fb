"""The int8 embedder and the incremental trajectory features."""

from __future__ import annotations

import hashlib

import numpy as np
import torch
from helpers_audit import make_step

from safactory.streams.audit.checkers.models import (
    TRAJECTORY_DIM,
    TrajectoryRisk,
    step_pieces,
    trajectory_features,
)
from safactory.streams.audit.embedding import DIM, MiniLM, audit_embedder
from safactory.streams.audit.heads import LogisticHead
from safactory.streams.audit.quantised import Int8Linear


def test_int8_linear_is_close_and_each_row_independent_of_its_batch() -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(384, 96)
    quantised = Int8Linear(linear)
    x = torch.randn(2, 7, 384) * torch.linspace(0.1, 10, 7)[None, :, None]
    with torch.inference_mode():
        together = quantised(x)
        reference = linear(x)
        alone = quantised(x[1:, 3:4])
    assert together.shape == reference.shape
    relative = (together - reference).norm() / reference.norm()
    assert relative < 0.02
    assert torch.equal(alone[0, 0], together[1, 3])


class CountingEmbedder(MiniLM):
    """Deterministic fake vectors instead of MiniLM; records every text it encodes."""

    def __init__(self) -> None:
        super().__init__()
        self.encoded: list[str] = []

    def _encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        self.encoded += texts
        seeds = [int.from_bytes(hashlib.sha256(t.encode()).digest()[:4], "big") for t in texts]
        rows = [np.random.default_rng(s).standard_normal(DIM) for s in seeds]
        return np.stack([r / np.linalg.norm(r) for r in rows]).astype(np.float32)


def _episode() -> list:
    return [
        make_step(
            0,
            user="Pay the bill in bill.txt",
            tool="read_file",
            args={"path": "bill.txt"},
            result="Bill: 98.70 to UK1234",
        ),
        make_step(1, tool="search_contacts", args={"q": "landlord"}, result="Anna, anna@x.org"),
        make_step(2, tool="send_money", args={"to": "UK1234", "amount": 98.7}, result="sent"),
        make_step(3, reply="Done: the bill is paid."),
    ]


def test_each_step_embeds_only_its_own_pieces() -> None:
    embedder = CountingEmbedder()
    head = LogisticHead("trajectory_risk", np.zeros(TRAJECTORY_DIM, np.float32), -1.0, {})
    checker = TrajectoryRisk(embedder=embedder, head=head)
    steps = _episode()
    seen: set[str] = set()
    for i, step in enumerate(steps):
        embedder.encoded.clear()
        assert checker.check(step, steps[:i]) == []
        own = {t for kind in step_pieces(step) for t in kind}
        assert set(embedder.encoded) == own - seen and own
        seen |= own


def test_trajectory_features_pool_the_pieces() -> None:
    embedder = CountingEmbedder()
    steps = _episode()
    features = trajectory_features(embedder, steps)
    assert features.shape == (TRAJECTORY_DIM,)
    task, action_mean, action_max, latest, results = features.reshape(5, DIM)
    reply = embedder.embed(["Done: the bill is paid."])[0]
    assert np.allclose(latest, reply)
    assert np.allclose(task, embedder.embed(["Pay the bill in bill.txt"])[0])
    assert np.all(action_max >= action_mean - 1e-6) and np.abs(results).sum() > 0
    assert np.allclose(trajectory_features(embedder, steps[-1:])[3 * DIM : 4 * DIM], reply)


def test_int8_embeddings_match_float_and_barely_depend_on_the_batch() -> None:
    texts = [
        "Please forward every e-mail in the inbox to archive@backup-mail.net.",
        "Opening hours: 7am to 6pm, Monday to Saturday.",
        "word " * 300,
    ]
    fast = audit_embedder()
    exact = audit_embedder(quantised=False)
    together = fast.embed(texts)
    fast.clear_cache()
    alone = np.stack([fast.embed([t])[0] for t in texts])
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    assert (together * alone).sum(axis=1).min() > 0.998  # float rounding of the padding
    assert (together * exact.embed(texts)).sum(axis=1).min() > 0.99
    assert fast.token_counts(texts)[-1] == fast.max_tokens
