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
