"""A broker that exits while starting says why in the error itself, not only in its logs."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from loopback_ports import free_ports

from safactory.infra.broker import BrokerError, LocalBroker

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
