"""The metrics registry: stats objects are views over it, and a worker's /metrics shows what
it counted (records in and out, dead letters per reason, handling time, lag)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from safactory.infra import metrics
from safactory.infra.config import Settings
from safactory.infra.producer import EventProducer
from safactory.schemas import Action, FunctionCall, Step, ToolCall

FAST = "harm.beyond_scope,harm.unrequested_action,rule.secrets"


class _Demo(metrics.Tally):
    seen = metrics.Count("sf_test_seen", "test counter")
    kept = metrics.Count("sf_test_kept", "test counter per reason", "reason")
    depth = metrics.Level("sf_test_depth", "test gauge")


def _sample(name: str, **labels: str) -> float:
    value = metrics.REGISTRY.get_sample_value(name, {"worker": metrics.worker_name(), **labels})
    return value or 0.0


def test_stats_are_views_over_the_registry() -> None:
    first = _Demo()
    first.seen += 2
    first.count("kept", reason="a")
    first.count("kept", 3, reason="b")
    assert first.seen == 2 and first.kept == 4 and first.by("kept") == {"a": 1, "b": 3}
    assert _sample("sf_test_seen_total") >= 2  # counted in the registry, not beside it
    second = _Demo()  # a new view counts from its making, not from the process start
    second.seen += 1
    assert second.seen == 1 and second.kept == 0 and first.seen == 3
    second.depth = 7
    assert _sample("sf_test_depth") == 7 and first.depth == 7
    with pytest.raises(TypeError, match="use count"):
        first.kept += 1
    with pytest.raises(ValueError, match="only goes up"):
        first.seen = 0
    assert "seen=3" in repr(first)


def test_trainer_updates_set_loss_and_throughput() -> None:
    from types import SimpleNamespace

    from safactory.trainer.stream import StreamStats

    stats = StreamStats()
    stats.last_update = SimpleNamespace(loss=0.25, tokens_per_s=1234.0)  # type: ignore[assignment]
    assert _sample("sf_trainer_loss") == 0.25
    assert _sample("sf_trainer_tokens_per_second") == 1234.0
    before = _sample("sf_stale_skipped_total", reason="policy-staleness")
    stats.count("skipped_stale", reason="policy-staleness")
    assert stats.skipped_stale == 1
    assert _sample("sf_stale_skipped_total", reason="policy-staleness") == before + 1


def test_a_busy_port_fails_in_one_line_naming_the_setting() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(metrics.MetricsPortBusy, match=f"SF_METRICS_PORT={port}: cannot listen"):
            metrics.serve(Settings(metrics_port=port), "audit")
    with pytest.raises(ValueError, match="choose one of audit"):
        metrics.serve(Settings(), "auditor")


def test_a_named_worker_has_series_before_its_first_batch() -> None:
    script = (  # a process of its own: this one's registry holds other tests' workers
        "from safactory.infra import metrics\n"
        "from safactory.infra.config import Settings\n"
        "metrics.serve(Settings(), 'score')\n"
        "for name in ('sf_processing_seconds_count', 'sf_loop_stall_seconds_count'):\n"
        "    print(metrics.REGISTRY.get_sample_value(name, {'worker': 'score'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.stdout.split() == ["0.0", "0.0"], out.stderr  # shown at 0, not missing


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _total(samples: dict, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= lab)


def _start(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "safactory.cli.main", "worker", "audit", "--checkers", FAST],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.integration
async def test_audit_worker_serves_its_counts(
    topics: Settings, producer: EventProducer, tmp_path: Path
) -> None:
    port = _free_port()
    env = {
        **os.environ,
        "SF_KAFKA_BOOTSTRAP": topics.kafka_bootstrap,
        "SF_TOPIC_PREFIX": topics.topic_prefix,
        "SF_HOME": str(tmp_path),
        "SF_METRICS_PORT": str(port),
    }
    log = tmp_path / "worker.log"
    proc = _start(env, log)
    steps = [
        Step(
            episode_id=f"ep-{i % 3}",
            step_index=i // 3,
            env="os",
            task_id="t",
            policy_version=0,
            action=Action(
                tool_call=ToolCall(
                    id="c",
                    function=FunctionCall(
                        name="shell",
                        arguments=json.dumps(
                            {"command": "rm -rf / --no-preserve-root" if i == 0 else f"ls {i}"}
                        ),
                    ),
                )
            ),
        )
        for i in range(12)
    ]
    try:
        await producer.publish_many(steps)
        bad = await producer.send_raw(
            topics.topic("steps"), key=b"ep-x", value=b"\xffnot an event", headers=[]
        )
        await bad
        steps_topic = topics.topic("steps")
        samples: dict = {}
        for _ in range(240):
            assert proc.poll() is None, log.read_text()[-2000:]
            try:
                samples = _scrape(port)
            except OSError:
                samples = {}
            if (  # every count asserted below: alerts go out after their step is counted
                _total(samples, "sf_dead_letters_total", worker="audit", reason="decode") >= 1
                and _total(samples, "sf_audit_steps_total", worker="audit") >= len(steps)
                and _total(samples, "sf_records_out_total", topic=topics.topic("verdicts"))
                >= len(steps)
                and _total(samples, "sf_records_out_total", topic=topics.topic("alerts")) >= 1
            ):
                break
            await asyncio.sleep(0.5)
        ins = _total(samples, "sf_records_in_total", worker="audit", topic=steps_topic)
        assert ins >= len(steps) + 1, samples
        assert _total(samples, "sf_dead_letters_total", reason="decode", topic=steps_topic) == 1
        assert _total(samples, "sf_records_out_total", topic=topics.topic("verdicts")) >= len(steps)
        assert _total(samples, "sf_records_out_total", topic=topics.topic("alerts")) >= 1
        assert _total(samples, "sf_processing_seconds_count", worker="audit") >= 1
        lag = [k for k in samples if k[0] == "sf_consumer_lag" and ("topic", steps_topic) in k[1]]
        assert lag and all(samples[k] >= 0 for k in lag)
        assert _total(samples, "process_resident_memory_bytes") > 0  # the process collector
    finally:
        _stop(proc)
