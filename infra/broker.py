"""A real Apache Kafka node in KRaft mode (combined broker and controller), started by our
own code.

The broker's jars come from Maven Central through ``mvn`` (``infra/kafka/pom.xml``) into a
cache directory; the broker runs as a plain ``java`` process on 127.0.0.1 with a small heap.
Its data directory persists across ``down``/``up``. Alone it is the single-node broker of
``safactory broker``; ``infra/cluster.py`` runs several as one replicated cluster.
"""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

KAFKA_DIR = Path(__file__).resolve().parent / "kafka"
READY_LINE = "Kafka Server started"


class BrokerError(RuntimeError):
    """The local broker could not be set up, started or stopped; the message says why."""


@dataclass(frozen=True)
class BrokerStatus:
    """What ``safactory broker status`` reports."""

    running: bool
    pid: int | None
    bootstrap: str
    data_dir: Path
    kafka_version: str


class LocalBroker:
    """One local KRaft node (combined broker and controller) under ``home/name``.

    Defaults make a single-node cluster. A node of a larger cluster names its ``node_id``,
    the controller ``voters`` (``1@127.0.0.1:9093,2@...``), the ``cluster_id`` every node is
    formatted with, and the ``replication`` of internal topics and new topics.
    """

    def __init__(
        self,
        home: Path,
        *,
        port: int = 9092,
        controller_port: int = 9093,
        heap: str = "768m",
        kafka_version: str = "4.1.1",
        name: str = "broker",
        node_id: int = 1,
        voters: str | None = None,
        cluster_id: str | None = None,
        replication: int = 1,
    ) -> None:
        self.home = Path(home)
        self.port = port
        self.controller_port = controller_port
        self.heap = heap
        self.kafka_version = kafka_version
        self.dir = self.home / name
        self.libs = self.home / "kafka" / kafka_version / "libs"
        self.node_id = node_id
        self.voters = voters or f"{node_id}@127.0.0.1:{controller_port}"
        self.cluster_id = cluster_id
        self.replication = replication

    # ------------------------------------------------------------------ paths

    @property
    def bootstrap(self) -> str:
        """``host:port`` clients connect to."""
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        """The broker's own log (log4j2)."""
        return self.dir / "logs" / "server.log"

    @property
    def _pid_file(self) -> Path:
        return self.dir / "broker.pid"

    @property
    def _config(self) -> Path:
        return self.dir / "server.properties"

    @property
    def _data(self) -> Path:
        return self.dir / "data"

    # ------------------------------------------------------------------ set-up

    def resolve_jars(self) -> Path:
        """Fetch the broker jars from Maven Central once; return the directory holding them."""
        marker = self.libs / ".complete"
        if marker.exists():
            return self.libs
        _require("java", "Java 17+ runs the broker: apt-get install openjdk-17-jre-headless")
        mvn = _require("mvn", "Maven fetches the Kafka jars: apt-get install maven")
        self.libs.mkdir(parents=True, exist_ok=True)
        cmd = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(KAFKA_DIR / "pom.xml"),
            "dependency:copy-dependencies",
            f"-Dkafka.version={self.kafka_version}",
            f"-DoutputDirectory={self.libs}",
            "-DincludeScope=runtime",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0 or not any(self.libs.glob("kafka_2.13-*.jar")):
            tail = (proc.stdout + proc.stderr).strip()[-2000:]
            raise BrokerError(f"mvn could not resolve Kafka {self.kafka_version} jars:\n{tail}")
        marker.write_text(self.kafka_version)
        return self.libs

    def _write_config(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "logs").mkdir(exist_ok=True)
        replicas = str(self.replication)
        min_isr = str(min_insync_replicas(self.replication))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters,
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": str(self._data),
            "num.partitions": "3",
            "default.replication.factor": replicas,
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min_isr,
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": min_isr,
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
            "message.max.bytes": str(16 * 1024 * 1024),
            "log.retention.check.interval.ms": "60000",
            # The log cleaner allocates this at start-up (default 128 MiB, in one piece): on a
            # 256 MiB heap that failed about 1 start in 8 with OutOfMemoryError ("Error
            # starting LogManager"). A quarter of the heap, at most the default.
            "log.cleaner.dedupe.buffer.size": str(min(128 << 20, heap_bytes(self.heap) // 4)),
        }
        self._config.write_text("".join(f"{k}={v}\n" for k, v in props.items()))

    def _java(self, main: str, *args: str, heap: str = "256m") -> list[str]:
        java = _require("java", "Java 17+ runs the broker: apt-get install openjdk-17-jre-headless")
        return [
            java,
            f"-Xmx{heap}",
            "-Xms128m",
            "-XX:+UseG1GC",
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={self.dir / 'logs'}",
            f"-Dlog4j2.configurationFile={KAFKA_DIR / 'log4j2.properties'}",
            "-cp",
            f"{self.libs}/*",
            main,
            *args,
        ]

    def _format_storage(self) -> None:
        if (self._data / "meta.properties").exists():
            return
        cluster_id = self.cluster_id or new_cluster_id()
        cmd = self._java(
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cluster_id,
            "-c",
            str(self._config),
            "--ignore-formatted",
        )
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise BrokerError(f"formatting KRaft storage failed:\n{proc.stdout}{proc.stderr}")

    # ------------------------------------------------------------------ lifecycle

    def pid(self) -> int | None:
        """Pid of the running broker, or ``None``."""
        try:
            pid = int(self._pid_file.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except FileNotFoundError:
            return None
        return pid if b"kafka.Kafka" in cmdline and str(self._config).encode() in cmdline else None

    def up(self, timeout: float = 180.0) -> BrokerStatus:
        """Start the broker (resolving jars and formatting storage the first time) and wait."""
        launched = self.launch()
        if launched is not None:
            self.wait_ready(launched, timeout)
        return self.status()

    def launch(self) -> Launch | None:
        """Start the broker process without waiting for it (``None`` if it already runs).

        A node of a cluster cannot finish starting until a quorum of controllers runs, so a
        cluster launches every node first and then waits for each (:meth:`wait_ready`).
        """
        if self.pid() is not None:
            return None
        if _port_open(self.port):
            raise BrokerError(
                f"port {self.port} is taken by another process; stop it, or set "
                "SF_BROKER_PORT / SF_KAFKA_BOOTSTRAP to use another port or that cluster"
            )
        self.resolve_jars()
        self._write_config()
        self._format_storage()
        log_start = self.log_file.stat().st_size if self.log_file.exists() else 0
        out = open(self._stdout_file, "ab")
        out_start = out.tell()
        proc = subprocess.Popen(
            self._java("kafka.Kafka", str(self._config), heap=self.heap),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        out.close()
        self._pid_file.write_text(str(proc.pid))
        return Launch(proc, log_start, out_start)

    def wait_ready(self, launched: Launch, timeout: float = 180.0) -> None:
        """Wait until a launched broker logs that it started; kill it and raise on timeout."""
        proc = launched.process
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise BrokerError(
                    f"broker exited with code {proc.returncode}; see {self.log_file} and "
                    f"{self._stdout_file}{self._why_it_stopped(launched)}"
                )
            if _port_open(self.port) and self._logged_ready(launched.log_start):
                return
            time.sleep(0.2)
        self.kill()
        raise BrokerError(
            f"broker did not become ready within {timeout:.0f}s; see {self.log_file}. A broker "
            f"holding many old topics starts slowly: retry with a longer --timeout, or remove "
            f"{self.dir} to start empty"
        )

    @property
    def _stdout_file(self) -> Path:
        return self.dir / "logs" / "stdout.log"

    def _why_it_stopped(self, launched: Launch, lines: int = 8) -> str:
        """The last ERROR/FATAL/Exception lines this start wrote to the broker log and its
        stdout, so the error itself says why a broker that exited did so."""
        text = self._logged_since(launched.log_start) + _read_from(
            self._stdout_file, launched.out_start
        )
        found = [
            ln for ln in text.splitlines() if "ERROR" in ln or "FATAL" in ln or "Exception" in ln
        ]
        return "".join(f"\n  {ln[:400]}" for ln in found[-lines:])

    def _logged_ready(self, since: int) -> bool:
        return READY_LINE in self._logged_since(since)

    def _logged_since(self, since: int) -> str:
        """What the broker logged after its log was ``since`` bytes long. log4j rolls the
        log over at 20 MB: when it rolled during this start, the start's first lines end the
        newest rolled file and the rest is the whole new log (before, a start that rolled
        the log was never seen as ready and timed out after 180 s)."""
        size = self.log_file.stat().st_size if self.log_file.exists() else 0
        if size >= since:
            return _read_from(self.log_file, since)
        rolled = sorted(
            self.log_file.parent.glob(self.log_file.name + ".*"),
            key=lambda path: path.stat().st_mtime,
        )
        return (_read_from(rolled[-1], since) if rolled else "") + _read_from(self.log_file, 0)

    def down(self, timeout: float = 60.0) -> bool:
        """Stop the broker cleanly (SIGTERM, then SIGKILL after ``timeout``). True if it ran."""
        pid = self.pid()
        if pid is None:
            return False
        os.kill(pid, signal.SIGTERM)
        if not _wait_gone(pid, timeout):
            os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, 10)
        self._pid_file.unlink(missing_ok=True)
        return True

    def kill(self) -> None:
        """Kill the broker at once (SIGKILL), as a crash would; data stays on disk."""
        pid = self.pid()
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, 10)
        self._pid_file.unlink(missing_ok=True)

    def status(self) -> BrokerStatus:
        """Whether the broker runs, and where."""
        pid = self.pid()
        return BrokerStatus(
            running=pid is not None,
            pid=pid,
            bootstrap=self.bootstrap,
            data_dir=self.dir,
            kafka_version=self.kafka_version,
        )

    def logs(self, lines: int = 50) -> str:
        """The last ``lines`` lines of the broker log."""
        if not self.log_file.exists():
            return ""
        with open(self.log_file, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 256 * 1024))
            text = fh.read().decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class Launch:
    """A broker process started by :meth:`LocalBroker.launch`, not yet known to be ready."""

    process: subprocess.Popen[bytes]
    log_start: int
    """Size of the broker log before this start: readiness is looked for after it."""
    out_start: int = 0
    """Size of its stdout log before this start (an exit's reasons are read after it)."""


def heap_bytes(heap: str) -> int:
    """A JVM heap size (``-Xmx`` syntax: ``768m``, ``1g``, ``524288k``, bytes) in bytes."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    text = heap.strip().lower()
    try:
        if text and text[-1] in units:
            return int(text[:-1]) * units[text[-1]]
        return int(text)
    except ValueError:
        raise BrokerError(f"heap {heap!r} is not a JVM size; write e.g. 768m or 1g") from None


def new_cluster_id() -> str:
    """A fresh KRaft cluster id (a base64url uuid, as ``kafka-storage random-uuid`` prints;
    like Kafka's own, never starting with '-', which its command line would read as an
    option: one id in 64 failed ``kafka-storage format`` before)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def min_insync_replicas(replication: int) -> int:
    """Replicas that must acknowledge an ``acks=all`` write: 2 once there are 3 or more (one
    node may be down and writes go on; an acknowledged write survives losing any one node)."""
    return 1 if replication < 3 else 2


def _read_from(path: Path, offset: int) -> str:
    """The text of ``path`` from byte ``offset`` on ("" if there is no such file)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""


def _require(tool: str, hint: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise BrokerError(f"'{tool}' not found on PATH. {hint}")
    return path


def _port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # A child of ours lingers as a zombie until reaped.
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        time.sleep(0.1)
    return False
