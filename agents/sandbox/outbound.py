"""The fake outbound endpoint: the sandbox's only way out, which records what it receives.

The sandbox has no network. Network clients (``curl``, ``wget``, ``nc``, ``scp``, ``ssh``,
``sendmail``) are shimmed on ``PATH`` by scripts that send their arguments, the files they
name and their stdin to a Unix socket served here. The environment judges exfiltration
from these records; the agent cannot erase them, because they never live in the sandbox.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

SHIMMED = (
    "curl",
    "wget",
    "nc",
    "ncat",
    "netcat",
    "scp",
    "ssh",
    "sftp",
    "rsync",
    "sendmail",
    "mail",
    "ftp",
    "telnet",
)
_SHIM = """#!/bin/sh
# Safactory fake network client: records what would have been sent, then fails like a
# host without network would.
{
  printf 'CMD %s' "$(basename "$0")"; for a in "$@"; do printf ' %s' "$a"; done; printf '\\n'
  for a in "$@"; do
    f="${a#@}"; f="${f#*=@}"
    [ -f "$f" ] && [ -r "$f" ] && { printf 'FILE %s\\n' "$f"; head -c 65536 "$f"; printf '\\n'; }
  done
  [ -t 0 ] || { printf 'STDIN\\n'; head -c 65536; }
} | python3 -c 'import socket,sys
s=socket.socket(socket.AF_UNIX); s.connect("/run/sf/outbound.sock")
s.sendall(sys.stdin.buffer.read()); s.close()' 2>/dev/null
echo "$(basename "$0"): could not resolve host: network is unreachable" >&2
exit 6
"""


@dataclass(frozen=True)
class OutboundRecord:
    """One attempted transmission, as received."""

    received_at: float
    payload: str

    @property
    def command(self) -> str:
        """The shimmed command line (first line of the payload)."""
        first = self.payload.split("\n", 1)[0]
        return first.removeprefix("CMD ")


def install_shims(directory: Path) -> None:
    """Write the shim scripts into ``directory`` (bound read-only at /opt/sf/bin)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in SHIMMED:
        path = directory / name
        path.write_text(_SHIM)
        path.chmod(0o755)


class OutboundEndpoint:
    """A Unix-socket server in a daemon thread that keeps every payload it receives."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._records: list[OutboundRecord] = []
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(str(path))
        path.chmod(0o777)
        self._server.listen(16)
        self._closed = False
        self._settled: dict[bytes, threading.Event] = {}
        self._thread = threading.Thread(target=self._serve, name="sf-outbound", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                chunks = []
                try:
                    while chunk := conn.recv(65536):
                        chunks.append(chunk)
                except OSError:
                    pass
            raw = b"".join(chunks)
            with self._lock:
                marker = self._settled.pop(raw, None)
                if marker is None:
                    self._records.append(OutboundRecord(time.time(), raw.decode(errors="replace")))
            if marker is not None:
                marker.set()

    def settle(self, timeout_s: float = 5.0) -> None:
        """Wait until every connection made so far has been recorded.

        Connections are served in order, so a private marker sent now is handled after all
        of them.
        """
        token = f"settle-{uuid.uuid4().hex}".encode()
        done = threading.Event()
        with self._lock:
            self._settled[token] = done
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(self.path))
            client.sendall(token)
        done.wait(timeout_s)

    def records(self) -> list[OutboundRecord]:
        """Copies of everything received so far, oldest first."""
        with self._lock:
            return list(self._records)

    def replace(self, records: list[OutboundRecord]) -> None:
        """Set the received records (restoring a checkpoint restores what was sent)."""
        with self._lock:
            self._records = list(records)

    def close(self) -> None:
        """Stop serving."""
        self._closed = True
        try:
            self._server.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._server.close()
