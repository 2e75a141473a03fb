"""``safactory demo``: the closed loop on the local broker with embedded defaults."""

from __future__ import annotations

import asyncio
import uuid
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ..infra.config import Settings, get_settings
from ..infra.consumer import Delivery, EventConsumer
from ..infra.producer import EventProducer
from ..infra.topics import create_topics
from ..schemas import Action, EpisodeEnded, EpisodeStarted, Outcome, Step

console = Console()


def demo(
    episodes: Annotated[int, typer.Option(help="episodes to run", min=1)] = 3,
    steps: Annotated[int, typer.Option(help="steps per episode", min=1)] = 4,
) -> None:
    """Run the closed loop on the local broker and print what each stage produced."""
    settings = get_settings()
    run = uuid.uuid4().hex[:8]
    asyncio.run(_backbone(settings, run, episodes, steps))


async def _backbone(settings: Settings, run: str, episodes: int, steps: int) -> None:
    await create_topics(settings)
    events = []
    for e in range(episodes):
        ep = f"demo-{run}-{e}"
        events.append(EpisodeStarted(episode_id=ep, task_id="demo", env="os",
                                     policy_name="scripted", policy_version=0))  # fmt: skip
        events += [Step(episode_id=ep, step_index=i, env="os", task_id="demo", policy_version=0,
                        action=Action(text=f"echo step {i}")) for i in range(steps)]  # fmt: skip
        events.append(EpisodeEnded(episode_id=ep, task_id="demo", env="os",
                                   outcome=Outcome.SUCCESS, num_steps=steps))  # fmt: skip
    counts: dict[str, int] = {}

    async def count(d: Delivery) -> None:
        if d.event.episode_id.startswith(f"demo-{run}"):  # type: ignore[attr-defined]
            counts[type(d.event).__name__] = counts.get(type(d.event).__name__, 0) + 1

    consumer = EventConsumer(["steps", "episodes"], f"demo-{run}", handler=count,
                             settings=settings, from_beginning=False)  # fmt: skip
    async with consumer, EventProducer(settings) as producer:
        while not consumer.assignment():
            await consumer.poll_once(timeout_ms=500)  # join the group, positions at the end
        acks = await producer.publish_many(events)
        malformed = await producer.send_raw(
            settings.topic("steps"), key=b"demo-bad", value=b"{not json",
            headers=[("sf-schema", b"step/1")],
        )  # fmt: skip
        await malformed
        console.print(f"published {len(acks)} events and 1 malformed record")
        await consumer.run(idle_timeout=3.0)
    table = Table("event", "read back")
    for name, n in sorted(counts.items()):
        table.add_row(name, str(n))
    console.print(table)
    console.print(f"dead-lettered to {settings.topic('dlq')}: {consumer.stats.dead_lettered}")
