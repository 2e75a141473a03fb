"""Free loopback ports for the brokers tests start themselves."""

from __future__ import annotations

import random
import socket


def free_ports(span: int) -> int:
    """A port p with p .. p + span - 1 free on 127.0.0.1, below the kernel's ephemeral range:
    a port the kernel hands to client sockets can be taken between this probe and a broker's
    bind, or while a killed broker is down (the node then exits with code 1)."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20_000, 32_000 - span)
        held = []
        try:
            for port in range(base, base + span):
                probe = socket.socket()
                held.append(probe)
                probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for probe in held:
                probe.close()
        return base
    raise RuntimeError("no free run of ports on 127.0.0.1 below 32000")
