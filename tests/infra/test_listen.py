"""Where an HTTP surface listens: an exposed bind needs a token of 16 characters or more, a
port taken is one line naming the fix, port 0 picks a free one."""

from __future__ import annotations

import pytest

from safactory.infra.listen import ListenError, address, check_exposure, listen_socket


@pytest.mark.parametrize(
    ("host", "token", "said"),
    [
        ("0.0.0.0", None, "--host 0.0.0.0 is reachable from other machines; pass --token"),
        ("127.0.0.1", "short", "--token has 5 characters; use at least 16"),
    ],
)
def test_exposure_is_refused_with_the_fix(host: str, token: str | None, said: str) -> None:
    with pytest.raises(ListenError, match=said):
        check_exposure(host, token)


def test_port_zero_listens_on_a_free_port_and_a_taken_one_says_so() -> None:
    sock = listen_socket("127.0.0.1", 0)
    try:
        port = sock.getsockname()[1]
        assert port > 0 and address("127.0.0.1", sock) == f"http://127.0.0.1:{port}"
        with pytest.raises(ListenError, match=f"--port {port}: cannot listen"):
            listen_socket("127.0.0.1", port)
    finally:
        sock.close()


@pytest.mark.parametrize(
    ("command", "variable"),
    [
        (["gateway", "--upstream", "http://127.0.0.1:9/v1"], "SF_GATEWAY_TOKEN"),
        (["serve"], "SF_SERVE_TOKEN"),
    ],
)
def test_a_refused_bind_names_the_servers_own_token_variable(
    command: list[str], variable: str
) -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.endswith("_TOKEN")}
    done = subprocess.run(
        [sys.executable, "-m", "safactory.cli.main", *command, "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode != 0
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(said) <= 2 and variable in done.stderr, done.stderr


def test_a_connection_that_trickles_its_head_is_closed_and_a_whole_one_is_served() -> None:
    import multiprocessing
    import socket
    import time

    sock = listen_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = multiprocessing.get_context("fork").Process(
        target=_serve_ok, args=(sock, 1.0), daemon=True
    )
    server.start()
    try:
        ok = _request(port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert ok.startswith(b"HTTP/1.1 200"), ok
        slow = socket.create_connection(("127.0.0.1", port), timeout=10)
        began = time.monotonic()
        slow.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # the blank line never comes
        for _ in range(5):  # a byte now and then: uvicorn's keep-alive timer alone restarts
            time.sleep(0.3)
            try:
                slow.sendall(b"X")
            except OSError:
                break
        assert slow.recv(100) == b"" and time.monotonic() - began < 5  # closed, nothing said
        again = _request(port, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert again.startswith(b"HTTP/1.1 200"), again
    finally:
        server.kill()
        sock.close()


def _serve_ok(sock: object, timeout_s: float) -> None:
    from fastapi import FastAPI

    from safactory.infra.listen import serve_on

    app = FastAPI()
    app.get("/")(lambda: {"ok": True})
    serve_on(app, sock, graceful_s=1, head_timeout_s=timeout_s)  # type: ignore[arg-type]


def _request(port: int, raw: bytes) -> bytes:
    import socket
    import time

    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
                conn.sendall(raw)
                return conn.recv(1000)
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
