"""Offsets, checkpoints, the journal and configuration errors, without a broker."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from safactory.trainer.checkpoint import CheckpointStore, TrainerState, TrainingJournal
from safactory.trainer.config import ConfigError, ModelConfig, load_config
from safactory.trainer.model import build_model
from safactory.trainer.offsets import OffsetLedger


def test_offsets_finish_out_of_order_and_survive_a_snapshot() -> None:
    ledger = OffsetLedger()
    for offset in (0, 2, 3, 5):
        ledger.finish(1, offset)
    assert ledger.progress(1).watermark == 1
    restored = OffsetLedger.from_json(ledger.to_json())  # type: ignore[arg-type]
    assert [restored.is_done(1, o) for o in range(7)] == [
        True,
        False,
        True,
        True,
        False,
        True,
        False,
    ]
    restored.finish(1, 1)
    restored.finish(1, 4)
    assert restored.progress(1).watermark == 6 and not restored.progress(1).done_above


def test_checkpoint_round_trip_and_journal_truncation(tmp_path: Path) -> None:
    model = build_model(ModelConfig(hidden_size=16, intermediate_size=32, num_heads=2), 20)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    store = CheckpointStore(tmp_path, keep=2)
    journal = TrainingJournal(tmp_path)
    state = TrainerState(
        version=3,
        commits=1,
        offsets={"0": {"watermark": 7, "done_above": [9]}},
        accepted={0: 5},
        skipped={3: 1},
        trained_total=5,
    )
    journal.append(1, 3, ["a", "b"], ["c"])
    store.save(model, optimizer, state)
    journal.append(2, 4, ["d"], [])  # its checkpoint never commits (killed)
    with journal.path.open("a") as fh:
        fh.write('{"commit": 3, "torn')
    fresh = build_model(ModelConfig(hidden_size=16, intermediate_size=32, num_heads=2, seed=1), 20)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-3)
    loaded = store.load(fresh, fresh_opt)
    assert loaded == state
    pairs = zip(model.state_dict().values(), fresh.state_dict().values(), strict=True)
    assert all(torch.equal(a, b) for a, b in pairs)
    assert fresh_opt.state_dict()["state"][0]["step"] == 1
    journal.truncate_after(loaded.commits)
    assert [e["trained"] for e in journal.entries()] == [["a", "b"]]


def test_config_errors_name_the_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text("[trainer]\nmax_staleness = -1\n")
    with pytest.raises(ConfigError, match=r"t\.toml: field 'max_staleness'"):
        load_config(path)
    path.write_text("[trainer]\nbatch_size = 8\n[trainer.model]\nhidden_size = 30\nnum_heads = 4\n")
    with pytest.raises(ConfigError, match=r"field 'model'.*multiple of num_heads"):
        load_config(path)
    path.write_text("[trainer]\nbatch_size = 8\nmode = 'sync'\n")
    cfg = load_config(path, batch_size=4, mode=None)
    assert (cfg.batch_size, cfg.mode, cfg.effective_staleness) == (4, "sync", 0)
