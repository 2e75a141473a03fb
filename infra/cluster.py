"""A local replicated Kafka cluster: N KRaft nodes (broker and controller each) on loopback.

Every node is a :class:`LocalBroker` with its own data directory under ``home/name``, its
own client and controller ports (``base_port + 2i`` and ``base_port + 2i + 1``), the same
cluster id and the same controller quorum (every node votes). Internal topics and new
topics get replication factor ``min(3, nodes)`` and ``min.insync.replicas`` 2 once there
are three replicas, so an ``acks=all`` write acknowledged by the cluster survives the loss
of any one node. It exists to test that claim (``bench/chaos.py --cluster``), not to
replace a real deployment.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .broker import BrokerError, Launch, LocalBroker, new_cluster_id


class LocalCluster:
    """``nodes`` local KRaft nodes forming one cluster under ``home/name``."""

    def __init__(
        self,
        home: Path,
        *,
        name: str = "cluster",
        nodes: int = 3,
        base_port: int = 19500,
        heap: str = "256m",
        kafka_version: str = "4.1.1",
    ) -> None:
        if nodes < 1:
            raise BrokerError(f"a cluster needs at least 1 node, not {nodes}; pass nodes=3")
        self.home = Path(home)
        self.dir = self.home / name
        voters = ",".join(f"{i + 1}@127.0.0.1:{base_port + 2 * i + 1}" for i in range(nodes))
        cluster_id = self._cluster_id()
        self.nodes = [
            LocalBroker(
                self.home,
                port=base_port + 2 * i,
                controller_port=base_port + 2 * i + 1,
                heap=heap,
                kafka_version=kafka_version,
                name=f"{name}/node-{i + 1}",
                node_id=i + 1,
                voters=voters,
                cluster_id=cluster_id,
                replication=min(3, nodes),
            )
            for i in range(nodes)
        ]

    def _cluster_id(self) -> str:
        """The id every node is formatted with, kept beside them so restarts agree."""
        path = self.dir / "cluster.id"
        if path.exists():
            return path.read_text().strip()
        self.dir.mkdir(parents=True, exist_ok=True)
        cluster_id = new_cluster_id()
        path.write_text(cluster_id)
        return cluster_id

    @property
    def bootstrap(self) -> str:
        """Every node's ``host:port``, comma-separated, for ``SF_KAFKA_BOOTSTRAP``."""
        return ",".join(node.bootstrap for node in self.nodes)

    def node(self, node_id: int) -> LocalBroker:
        """The node with Kafka ``node.id`` ``node_id`` (1-based)."""
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise BrokerError(f"no node {node_id}: this cluster has nodes 1..{len(self.nodes)}")

    def up(self, timeout: float = 180.0) -> None:
        """Start every node that is not running, then wait until each one is ready."""
        launched: list[tuple[LocalBroker, Launch]] = []
        try:
            for node in self.nodes:
                started = node.launch()
                if started is not None:
                    launched.append((node, started))
            for node, started in launched:
                node.wait_ready(started, timeout)
        except BrokerError:
            self.kill()
            raise

    def down(self, timeout: float = 60.0) -> None:
        """Stop every node cleanly; data stays for the next :meth:`up`."""
        for node in reversed(self.nodes):
            node.down(timeout)

    def kill(self) -> None:
        """SIGKILL every node, as a power cut would."""
        for node in self.nodes:
            node.kill()

    def remove(self) -> None:
        """Kill every node and delete the cluster's data."""
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
