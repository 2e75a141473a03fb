"""``safactory simulate``: help, clear errors, and a real run against the broker."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from typer.testing import CliRunner

from safactory.cli.main import app
from safactory.infra.config import Settings, get_settings
from safactory.infra.consumer import Delivery, EventConsumer
from safactory.schemas import EpisodeEnded, Step

runner = CliRunner()


def test_help_explains_every_command_and_option() -> None:
    out = runner.invoke(app, ["simulate", "run", "--help"], terminal_width=200).output
    for option in (
        "--env",
        "--tasks",
        "--concurrency",
        "--policy",
        "--attack",
        "--kind",
        "--guard-pattern",
        "--max-staleness",
        "--trainer-batch",
        "--workers",
        "--base-url",
        "--checkpoint",
    ):
        assert option in out
    assert "worker" in runner.invoke(app, ["simulate", "--help"]).output


def test_errors_name_the_option_and_the_fix() -> None:
    bad_env = runner.invoke(app, ["simulate", "run", "--env", "mars"])
    assert bad_env.exit_code == 1 and "--env 'mars': unknown; choose one of" in bad_env.output
    bad_param = runner.invoke(
        app, ["simulate", "run", "--env", "qa", "--attack", "jailbreak", "--attack-param", "oops"]
    )
    assert bad_param.exit_code == 1 and "write KEY=VALUE" in bad_param.output
    bad_attack = runner.invoke(app, ["simulate", "run", "--env", "qa", "--attack", "nope"])
    assert "unknown injector 'nope'" in bad_attack.output
    no_url = runner.invoke(app, ["simulate", "run", "--env", "qa", "--policy", "openai"])
    assert no_url.exit_code == 1 and "needs base_url and model" in no_url.output


@pytest.mark.integration
def test_run_puts_ordered_steps_with_ground_truth_on_kafka(topics: Settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("SF_TOPIC_PREFIX", topics.topic_prefix)
    monkeypatch.setenv("SF_KAFKA_BOOTSTRAP", topics.kafka_bootstrap)
    get_settings.cache_clear()
    try:
        result = runner.invoke(
            app,
            [
                "simulate",
                "run",
                "--env",
                "embodied",
                "--tasks",
                "6",
                "--concurrency",
                "3",
                "--policy",
                "reckless",
                "--kind",
                "safety",
                "--trainer-batch",  # the capacity rule on: no trainer announced, so
                "2",  # admission is the version rule alone and the run completes
                "--group",
                f"g-{uuid.uuid4().hex[:6]}",
            ],
            terminal_width=200,
        )
    finally:
        get_settings.cache_clear()
    assert result.exit_code == 0, result.output
    assert "6/6" in result.output and "violations:" in result.output
    events = asyncio.run(_read(topics, 6))
    ends = [d.event for d in events if isinstance(d.event, EpisodeEnded)]
    assert len(ends) == 6 and all(e.safety is not None and e.safety.unsafe for e in ends)
    for end in ends:
        steps = [
            d for d in events if isinstance(d.event, Step) and d.event.episode_id == end.episode_id
        ]
        indexes = [d.event.step_index for d in sorted(steps, key=lambda d: d.offset)]  # type: ignore[attr-defined]
        assert indexes == list(range(end.num_steps))


async def _read(settings: Settings, episodes: int) -> list[Delivery]:
    """Steps and episode ends until ``episodes`` episodes are complete (all their steps)."""
    seen: list[Delivery] = []

    async def keep(d: Delivery) -> None:
        seen.append(d)

    def complete() -> bool:
        ends = [d.event for d in seen if isinstance(d.event, EpisodeEnded)]
        steps = sum(isinstance(d.event, Step) for d in seen)
        return len(ends) >= episodes and steps >= sum(e.num_steps for e in ends)

    group = f"r-{uuid.uuid4().hex[:6]}"
    async with EventConsumer(["steps", "episodes"], group, handler=keep, settings=settings) as c:
        async with asyncio.timeout(60):
            while not complete():
                await c.poll_once(timeout_ms=300)
    return seen
