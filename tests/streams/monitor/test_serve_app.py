"""`safactory serve`'s app without the broker: the token gate, the refusal to expose the page
without one, the episode view read from a real LanceDB, and /metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from fastapi.testclient import TestClient

from safactory.cli.serve import check_exposure, web_app
from safactory.infra.config import Settings
from safactory.infra.consumer import Delivery
from safactory.schemas import (
    Action,
    EpisodeEnded,
    EpisodeStarted,
    Event,
    Evidence,
    Outcome,
    SafetyOutcome,
    Severity,
    Step,
    Verdict,
)
from safactory.sinks.lance import LanceSink

TOKEN = "k3y-for-the-test-only-0123"


def _verdict(step: Step, checker: str, severity: Severity, text: str | None = None) -> Verdict:
    return Verdict(
        episode_id=step.episode_id,
        source_event_id=step.event_id,
        step_index=step.step_index,
        env=step.env,
        checker=checker,
        risk_type="destructive_operation" if text else "none",
        severity=severity,
        score=1.0 if text else 0.0,
        evidence=[Evidence(text=text, field="action")] if text else [],
    )


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A LanceDB written by the sink: one episode, a benign step then a destructive one."""
    steps = [
        Step(
            episode_id="ep-7",
            step_index=i,
            env="os",
            task_id="t",
            policy_version=2,
            action=Action(text=text),
            observation=f"obs {i}",
            produced_at=1000.0 + i,
        )
        for i, text in enumerate(["ls ~/docs", "rm -rf ~/docs"])
    ]
    events: list[Event] = [
        EpisodeStarted(
            episode_id="ep-7", task_id="t", env="os", policy_name="lm", policy_version=2
        ),
        *steps,
        _verdict(steps[0], "rule.a", Severity.NONE),
        _verdict(steps[1], "rule.a", Severity.NONE),
        _verdict(steps[1], "harm.beyond_scope", Severity.CRITICAL, "rm -rf ~/docs"),
        EpisodeEnded(
            episode_id="ep-7",
            task_id="t",
            env="os",
            outcome=Outcome.FAILURE,
            safety=SafetyOutcome(unsafe=True, violations=["docs deleted"]),
            num_steps=2,
        ),
        Step(episode_id="ep-other", step_index=0, env="os", task_id="t", policy_version=2),
    ]
    sink = LanceSink(tmp_path / "lancedb")
    sink.write_batch(
        Delivery(e, f"sf.{e.TOPIC}", 0, n, e.key().encode(), []) for n, e in enumerate(events)
    )
    return tmp_path / "lancedb"


@pytest.fixture
def client(db: Path) -> TestClient:
    app = web_app(Settings(), db, token=TOKEN, follow=False)
    return TestClient(app, base_url="http://127.0.0.1")


def test_every_request_needs_the_token(client: TestClient) -> None:
    for path in ("/", "/events", "/api/view", "/api/episodes/ep-7", "/metrics", "/episodes/x"):
        refused = client.get(path)
        assert refused.status_code == 401, path
        assert "Authorization: Bearer" in refused.text
        assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert client.get(f"{path}?token=wrong").status_code == 401
    assert client.get("/", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200
    page = client.get(f"/episodes/ep-7?token={TOKEN}")
    assert page.status_code == 200 and "EventSource" in page.text


def test_episode_view_reads_steps_and_their_verdicts(client: TestClient) -> None:
    body = client.get(f"/api/episodes/ep-7?token={TOKEN}").json()
    assert [s["step_index"] for s in body["steps"]] == [0, 1]
    assert [s["action"] for s in body["steps"]] == ["ls ~/docs", "rm -rf ~/docs"]
    assert [v["severity"] for v in body["steps"][1]["verdicts"]] == ["critical", "none"]
    assert body["steps"][1]["verdicts"][0]["evidence"] == ["rm -rf ~/docs"]
    assert [v["checker"] for v in body["steps"][0]["verdicts"]] == ["rule.a"]
    assert body["started"]["policy_version"] == 2
    assert body["ended"]["unsafe"] is True and body["ended"]["violations"] == ["docs deleted"]
    missing = client.get(f"/api/episodes/ep-none?token={TOKEN}")
    assert missing.status_code == 404 and "ep-none" in missing.json()["error"]


def test_episode_view_names_a_missing_database(tmp_path: Path) -> None:
    app = web_app(Settings(), tmp_path / "nowhere", follow=False)
    answer = TestClient(app, base_url="http://127.0.0.1").get("/api/episodes/ep-7")
    assert answer.status_code == 404 and "--db" in answer.json()["error"]


def test_metrics_answer_in_prometheus_text(client: TestClient) -> None:
    answer = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    assert "# TYPE" in answer.text


@pytest.mark.parametrize(
    ("host", "token", "said"),
    [
        ("0.0.0.0", None, "--host 0.0.0.0 is reachable from other machines; pass --token"),
        ("192.168.1.5", None, "pass --token (or set SF_SERVE_TOKEN)"),
        ("127.0.0.1", "short", "--token has 5 characters; use at least 16"),
    ],
)
def test_exposed_binds_need_a_token(
    host: str, token: str | None, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(typer.Exit):
        check_exposure(host, token)
    err = capsys.readouterr().err
    assert said in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1", "127.0.0.2"])
def test_loopback_binds_need_no_token(host: str) -> None:
    check_exposure(host, None)
    check_exposure("0.0.0.0", TOKEN)
