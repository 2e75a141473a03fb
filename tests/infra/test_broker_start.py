"""Starting a broker: an exit says why in the error, the start is seen however its log rolls,
and the log cleaner fits the heap."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from loopback_ports import free_ports

from safactory.infra.broker import BrokerError, LocalBroker, heap_bytes

pytestmark = pytest.mark.integration


def test_a_broker_whose_controller_port_is_taken_exits_with_the_reason(tmp_path: Path) -> None:
    port = free_ports(2)
    broker = LocalBroker(tmp_path, port=port, controller_port=port + 1, name="exits")
    squatter = socket.socket()
    try:
        squatter.bind(("127.0.0.1", port + 1))
        squatter.listen()
        with pytest.raises(BrokerError) as raised:
            broker.up(timeout=120)
        first, *reasons = str(raised.value).splitlines()
        assert "exited with code" in first
        assert any("Address already in use" in line for line in reasons), reasons
    finally:
        squatter.close()
        broker.kill()


def test_the_log_cleaners_buffer_fits_the_heap(tmp_path: Path) -> None:
    """The cleaner's buffer, allocated in one piece at start-up, is at most a quarter of the
    heap: 128 MiB on a 256 MiB heap made a cluster node fail to start about 1 time in 8."""
    assert heap_bytes("256m") == 256 << 20 and heap_bytes("1g") == 1 << 30
    with pytest.raises(BrokerError, match="not a JVM size"):
        heap_bytes("lots")
    for heap, expected in (("256m", 64 << 20), ("768m", 128 << 20)):
        broker = LocalBroker(tmp_path, port=1, controller_port=2, heap=heap, name=heap)
        broker._write_config()
        assert f"log.cleaner.dedupe.buffer.size={expected}\n" in broker._config.read_text()


@pytest.mark.parametrize("ready_in", ["new log", "rolled log"])
def test_a_start_during_which_the_log_rolled_over_is_seen_ready(
    tmp_path: Path, ready_in: str
) -> None:
    """log4j rolls server.log over at 20 MB; a start that rolled it (the new log shorter
    than the old one was at launch) waited 180 s for a line it had already written."""
    broker = LocalBroker(tmp_path, port=1, controller_port=2, name="rolls")
    logs = broker.log_file.parent
    logs.mkdir(parents=True)
    broker.log_file.write_text("old line\n" * 100)
    since = broker.log_file.stat().st_size  # measured at launch
    ready = "[x] INFO [KafkaRaftServer nodeId=1] Kafka Server started\n"
    with broker.log_file.open("a") as log:  # the start's first lines, then the roll-over
        log.write("starting\n" + (ready if ready_in == "rolled log" else ""))
    broker.log_file.rename(logs / "server.log.3")
    broker.log_file.write_text("more\n" + (ready if ready_in == "new log" else ""))
    assert broker._logged_ready(since)
    assert not LocalBroker(tmp_path, port=1, controller_port=2, name="empty")._logged_ready(0)
