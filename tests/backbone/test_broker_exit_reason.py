"""A broker that exits while starting says why in the error itself, not only in its logs."""

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
