"""The streaming trainer: ``sf.trajectories`` in, policy versions on ``sf.policy`` out.

It consumes on the project's runtime, ``infra.consumer.EventConsumer`` (group ``trainer``,
scoped by the topic prefix): records are decoded and checked against the header contract
there, and every dead letter (undecodable, not a trajectory, not trainable with this
tokenizer) leaves by the consumer's one dead-letter path. Staleness is decided from the
``sf-policy-version`` header alone, in the consumer's screen, before a payload is decoded;
too-stale trajectories are counted and skipped, never dropped silently.

Offsets. Trajectories finish out of order (a group held back until it is complete, a
buffered one that went stale) and the position must agree with the model, so nothing is
committed to the group: the consumer hands each batch's end offsets to the
:class:`OffsetLedger` (``store_offsets``), which counts every record below them finished but
the buffered ones, and each checkpoint holds model, optimizer, version and ledger together.
When the group assigns partitions the trainer seeks them to the ledger's watermark and
passes over the finished records above it, so a restarted trainer trains on each trajectory
once. One trainer per topic prefix: a second member of the group would take half the
partitions.

After each update the trainer commits that checkpoint and announces the new weights
``{version, uri, sha256}`` on the compacted policy topic, with the trajectories it has
finished with so far (``consumed``: trained on, skipped as stale, or read as held-out
evaluation episodes), which the simulation workers' admission counts its capacity against
(``infra.staleness``): an episode a worker started and the trainer never counted would hold
a worker's capacity for good. With an inference server (``[trainer.vllm]``), a version is
announced only once the server confirms it loaded it (:mod:`.vllm_reload`): steps stamped
with a version then come from weights the server really served.

Why the trainer is no ``Processor`` of ``infra/processor.py`` run by ``safactory worker``:
a processor's offsets are committed to its group once a batch's outputs are acknowledged,
while the trainer's position must agree with its model (the ledger above, checkpointed with
the weights); it chooses its batch across partitions and groups instead of handling what
was polled; an update takes minutes of an accelerator; and it runs on several ranks under
``torchrun``. So it has its own entry, ``safactory train`` (a TOML file and the command's
options over it, :mod:`.launch`), on the same consumer, decoding and dead-letter path.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka import ConsumerRecord, TopicPartition

from ..infra import metrics as sf_metrics
from ..infra.config import Settings
from ..infra.consumer import Delivery, EventConsumer
from ..infra.producer import EventProducer
from ..infra.staleness import StalenessController
from ..infra.topics import admin_client
from ..schemas import PolicyVersion, Trajectory
from ..schemas import headers as h
from .checkpoint import CheckpointStore, TrainerState, TrainingJournal
from .config import Mode, TrainerConfig
from .learner import Learner, UpdateMetrics
from .offsets import OffsetLedger
from .transform import TrajectoryError
from .vllm_reload import ReloadError, VllmServerReloader
from .weights import WEIGHTS_FILE, StoredWeights, WeightStore, file_sha256

log = logging.getLogger(__name__)

GROUP = "trainer"
"""The trainer's consumer group (scoped by the topic prefix, ``Settings.group``)."""
TRAJECTORY_SCHEMAS = frozenset(Trajectory.schema_ids())
"""``sf-schema`` values of trajectories (every version the model decodes)."""
MAX_POLL_INTERVAL_MS = 3_600_000
"""An update and its checkpoint may take minutes on a big model: the group keeps the trainer
that long between polls."""


@dataclass
class _Pending:
    trajectory: Trajectory
    partition: int
    offset: int
    version: int
    arrived: float


class StreamStats(sf_metrics.Tally):
    """Counters of the stream side (in the metrics registry; what the CLI shows next to the
    update metrics). Setting ``last_update`` publishes its loss and tokens/s as gauges."""

    received = sf_metrics.Count("sf_trainer_received", "trajectories admitted")
    replayed = sf_metrics.Count("sf_trainer_replayed", "records the checkpoint already covers")
    """Records passed over on resume because the checkpoint already covers them."""
    skipped_stale = sf_metrics.Count(
        "sf_stale_skipped", "work skipped because its input was stale, per reason", "reason"
    )
    held_out = sf_metrics.Count(
        "sf_trainer_held_out", "evaluation trajectories read and never trained on"
    )
    buffered = sf_metrics.Level("sf_trainer_buffered", "trajectories waiting for an update")
    published = sf_metrics.Count("sf_trainer_published", "policy versions announced")
    reload_errors = sf_metrics.Count("sf_trainer_reload_errors", "inference reloads that failed")
    served_version = sf_metrics.Level(
        "sf_trainer_served_version", "the version the inference server last confirmed serving"
    )
    tokens = sf_metrics.Count("sf_trainer_tokens", "tokens through forward and backward")
    train_seconds = sf_metrics.Count("sf_trainer_train_seconds", "seconds in updates", kind=float)

    def __init__(self) -> None:
        super().__init__()
        self.dead_lettered = 0
        """The consumer's dead-letter count (``sf_dead_letters_total``), as of the last batch."""
        self._last: UpdateMetrics | None = None

    @property
    def last_update(self) -> UpdateMetrics | None:
        """What the latest update did."""
        return self._last

    @last_update.setter
    def last_update(self, update: UpdateMetrics | None) -> None:
        self._last = update
        if update is not None:
            sf_metrics.trained(update.loss, update.tokens_per_s)

    @property
    def tokens_per_s(self) -> float:
        """Mean training throughput so far."""
        return self.tokens / self.train_seconds if self.train_seconds else 0.0


class StreamingTrainer:
    """Consumes trajectories under the staleness rule, updates, checkpoints and publishes."""

    def __init__(
        self,
        config: TrainerConfig,
        settings: Settings,
        learner: Learner,
        *,
        on_update: Callable[[StreamingTrainer], None] | None = None,
    ) -> None:
        self.config = config
        self.settings = settings
        self.learner = learner
        self.on_update = on_update
        self.topic = settings.topic(Trajectory.TOPIC)
        self.store = WeightStore(config.weight_dir, config.policy_name, keep=config.keep_versions)
        self._held_out = re.compile(config.eval_tasks) if config.eval_tasks else None
        self._held_out_total = 0
        """Held-out trajectories read so far (checkpointed, announced in ``consumed``)."""
        self.checkpoints = CheckpointStore(config.checkpoint_dir, keep=config.keep_checkpoints)
        self.journal = TrainingJournal(config.checkpoint_dir)
        self.staleness = StalenessController(max_staleness=config.effective_staleness)
        self.reloader = VllmServerReloader(config.vllm) if config.vllm.enabled else None
        self._served: StoredWeights | None = None
        """The version announced as served: with a reloader, the last one it confirmed."""
        self.state = TrainerState()
        self.ledger = OffsetLedger()
        self.stats = StreamStats()
        self._buffer: list[_Pending] = []
        self._skipped_ids: list[str] = []
        self._stopping = asyncio.Event()
        self._read: dict[int, int] = {}
        """Partition → the offset up to which the consumer handed everything over."""
        self._producer = EventProducer(settings)
        self._consumer = EventConsumer(
            [Trajectory.TOPIC],
            settings.group(GROUP),
            batch_handler=self._admit,
            settings=settings,
            dlq_producer=self._producer,
            screen=self._screen,
            store_offsets=self._read_to,
            on_assigned=self._position,
            on_revoked=self._release,
            max_records=1000,
            isolation_level="read_committed",
            fetch_max_bytes=64 * 1024 * 1024,
            max_poll_interval_ms=MAX_POLL_INTERVAL_MS,
        )

    @property
    def version(self) -> int:
        """The trainer's current policy version (updates taken)."""
        return self.state.version

    def request_stop(self) -> None:
        """Ask :meth:`run` to finish the update in hand, checkpoint and return."""
        self._stopping.set()
        self._consumer.request_stop()

    async def run(
        self, *, max_updates: int | None = None, idle_timeout: float | None = None
    ) -> StreamStats:
        """Train until stopped, ``max_updates`` more updates, or ``idle_timeout`` s idle."""
        sf_metrics.serve(self.settings, "train")
        await self._producer.start()
        try:
            await self._resume()
            await self._wait_for_topic()
            await self._consumer.start()
            try:
                await self._loop(max_updates, idle_timeout)
            finally:
                await self._consumer.stop()
        finally:
            await self._producer.stop()
        return self.stats

    # ------------------------------------------------------------------ start-up

    async def _resume(self) -> None:
        state = await asyncio.to_thread(
            self.checkpoints.load, self.learner.model, self.learner.optimizer
        )
        if state is None:
            stored = await asyncio.to_thread(self._save_weights, 0)
            self.state = TrainerState(version=0, published_version=0)
            self.journal.truncate_after(0)
            await asyncio.to_thread(self._checkpoint, stored)
            await self._announce(stored)
            return
        self.state = state
        self.journal.truncate_after(state.commits)
        self.ledger = OffsetLedger.from_json(state.offsets)
        self.staleness.accepted = dict(state.accepted)
        self.staleness.skipped = dict(state.skipped)
        self._held_out_total = state.held_out
        if state.published_version is not None:
            # Re-announce: a kill between checkpoint and publish must not lose the version.
            path = self.store.path_of(state.published_version)
            stored = StoredWeights(state.published_version, path, file_sha256(path / WEIGHTS_FILE))
            await self._announce(stored)

    async def _position(self, assigned: set[TopicPartition]) -> None:
        """Read newly assigned partitions from the checkpoint's watermark (a partition it
        does not know from offset 0, i.e. the log's start)."""
        for tp in assigned:
            watermark = self.ledger.progress(tp.partition).watermark
            self._read[tp.partition] = watermark
            self._consumer.seek(tp, watermark)

    async def _release(self, revoked: set[TopicPartition]) -> None:
        """Forget buffered trajectories of revoked partitions: they are read again from the
        watermark by whoever is assigned them next."""
        gone = {tp.partition for tp in revoked}
        self._buffer = [item for item in self._buffer if item.partition not in gone]

    async def _wait_for_topic(self) -> None:
        """Wait briefly for a just-created trajectory topic; a clear error if there is none."""
        admin = admin_client(self.settings)
        await admin.start()
        try:
            for _ in range(50):
                described = await admin.describe_topics([self.topic])
                found = [t for t in described if t["topic"] == self.topic and not t["error_code"]]
                if found and found[0]["partitions"]:
                    return
                await asyncio.sleep(0.2)
        finally:
            await admin.close()
        raise RuntimeError(f"topic {self.topic} does not exist; run 'safactory topics create'")

    # ------------------------------------------------------------------ the loop

    async def _loop(self, max_updates: int | None, idle_timeout: float | None) -> None:
        loop = asyncio.get_running_loop()
        last_activity = loop.time()
        done = 0
        while not self._stopping.is_set():
            if len(self._buffer) < self.config.max_buffered:
                read = await self._consumer.poll_once(timeout_ms=100)
            else:  # backpressure: train (or release waiting groups) before reading more
                read = 0
                await asyncio.sleep(0.05)
            self.stats.dead_lettered = self._consumer.stats.dead_lettered
            if read:
                last_activity = loop.time()
            chosen = self._select_batch()
            if chosen:
                await self._train(chosen)
                done += 1
                last_activity = loop.time()
                if max_updates is not None and done >= max_updates:
                    break
            elif idle_timeout is not None and loop.time() - last_activity >= idle_timeout:
                break
        await asyncio.to_thread(self._checkpoint)

    def _screen(self, record: ConsumerRecord) -> bool:
        """Before decoding: pass over what the checkpoint covers and what its header says is
        too stale; decode the rest (a missing or malformed header is then dead-lettered)."""
        if self.ledger.is_done(record.partition, record.offset):
            self.stats.replayed += 1
            return False
        self.stats.received += 1
        if h.header_value(record.headers, h.SCHEMA) not in TRAJECTORY_SCHEMAS:
            return True  # dead-lettered once decoded
        raw_version = h.header_value(record.headers, h.POLICY_VERSION)
        if raw_version is None or not raw_version.isdigit():
            return True
        behaviour_version = int(raw_version)
        if self.staleness.is_fresh(self.version, behaviour_version):
            return True
        episode = h.header_value(record.headers, h.EPISODE) or f"offset:{record.offset}"
        self._skip(record.partition, record.offset, behaviour_version, episode)
        return False

    async def _admit(self, batch: list[Delivery]) -> None:
        """Buffer the decoded trajectories; dead-letter what this trainer cannot train on."""
        held = {(item.partition, item.offset) for item in self._buffer}
        dead = []
        now = time.monotonic()
        for delivery in batch:
            event = delivery.event
            if (delivery.partition, delivery.offset) in held:
                continue  # read again after a rebalance while it waited here
            if not isinstance(event, Trajectory):
                dead.append(
                    await self._consumer.dead_letter(
                        delivery,
                        (
                            f"header {h.SCHEMA!r}={event.schema_id()!r}, expected "
                            f"{Trajectory.schema_id()!r} on {self.topic}"
                        ),
                    )
                )
                continue
            if self._held_out is not None and self._held_out.search(event.task_id):
                self.stats.held_out += 1
                self._held_out_total += 1
                continue
            try:
                self.learner.transformer.validate(event)
            except TrajectoryError as exc:
                dead.append(await self._consumer.dead_letter(delivery, f"trajectory: {exc}"))
                continue
            self._buffer.append(
                _Pending(event, delivery.partition, delivery.offset, event.policy_version, now)
            )
        await asyncio.gather(*dead)

    def _read_to(self, offsets: dict[TopicPartition, int]) -> None:
        """The consumer handled everything below ``offsets``: every record there is finished
        but the buffered ones (trained or skipped later), including offsets the log holds no
        record at (a transaction marker, a compacted record)."""
        held = {(item.partition, item.offset) for item in self._buffer}
        for tp, end in offsets.items():
            progress = self.ledger.progress(tp.partition)
            for offset in range(max(self._read.get(tp.partition, 0), progress.watermark), end):
                if (tp.partition, offset) not in held:
                    progress.finish(offset)
            self._read[tp.partition] = end

    def _skip(self, partition: int, offset: int, behaviour_version: int, episode: str) -> None:
        self.staleness.consume(self.version, behaviour_version)
        self.stats.count("skipped_stale", reason="policy-staleness")
        self._skipped_ids.append(episode)
        self.ledger.finish(partition, offset)

    def _select_batch(self) -> list[_Pending]:
        fresh: list[_Pending] = []
        for item in self._buffer:
            if self.staleness.is_fresh(self.version, item.version):
                fresh.append(item)
            else:
                self._skip(item.partition, item.offset, item.version, item.trajectory.episode_id)
        self._buffer = fresh
        self.stats.buffered = len(fresh)
        groups: dict[str, list[_Pending]] = {}
        for item in fresh:
            groups.setdefault(item.trajectory.group_id, []).append(item)
        size, now = self.config.group_size, time.monotonic()
        eligible = [
            members
            for members in groups.values()
            if size is None
            or len(members) >= size
            or now - members[0].arrived >= self.config.group_wait_s
        ]
        if sum(len(m) for m in eligible) < self.config.batch_size:
            return []
        limit = (
            self.config.batch_size if self.config.mode is Mode.SYNC else self.config.max_batch_size
        )
        chosen: list[_Pending] = []
        for members in eligible:
            if chosen and len(chosen) + len(members) > limit:
                break
            chosen += members
            if len(chosen) >= limit:
                break
        picked = {id(item) for item in chosen}
        self._buffer = [item for item in fresh if id(item) not in picked]
        return chosen

    # ------------------------------------------------------------------ one update

    async def _train(self, chosen: list[_Pending]) -> None:
        for item in chosen:
            self.staleness.consume(self.version, item.version)
        metrics = await asyncio.to_thread(self.learner.update, [item.trajectory for item in chosen])
        self.state.version += 1
        self.state.trained_total += len(chosen)
        for item in chosen:
            self.ledger.finish(item.partition, item.offset)
        self.journal.append(
            self.state.commits + 1,
            self.version,
            [item.trajectory.episode_id for item in chosen],
            self._skipped_ids,
        )
        self._skipped_ids = []
        stored = None
        if self.version % self.config.publish_every == 0:
            stored = await asyncio.to_thread(self._save_weights, self.version)
            self.state.published_version = self.version
        await asyncio.to_thread(self._checkpoint, stored)
        if stored is not None:
            await self._announce(stored)
        self.stats.last_update = metrics
        self.stats.tokens += metrics.tokens
        self.stats.train_seconds += metrics.seconds
        if self.on_update is not None:
            self.on_update(self)

    def _save_weights(self, version: int) -> StoredWeights:
        stored = self.store.save(self.learner.model, self.learner.tokenizer, version)
        self.store.point_current(stored)
        return stored

    def _checkpoint(self, published: StoredWeights | None = None) -> None:
        self.state.offsets = self.ledger.to_json()
        self.state.accepted = dict(self.staleness.accepted)
        self.state.skipped = dict(self.staleness.skipped)
        self.state.held_out = self._held_out_total
        if self._skipped_ids:
            self.journal.append(self.state.commits + 1, self.version, [], self._skipped_ids)
            self._skipped_ids = []
        self.state.commits += 1
        weights = published.path / WEIGHTS_FILE if published is not None else None
        self.checkpoints.save(self.learner.model, self.learner.optimizer, self.state, weights)

    async def _announce(self, stored: StoredWeights) -> None:
        """Announce ``stored``; with an inference server, only once it confirms serving it.

        A reload that fails leaves the version it served before in force: that one is
        announced again, with the trainer's newer version and the reason it is not served
        (the workers' capacity still counts what was consumed), or, before the server ever
        confirmed one, nothing is."""
        error = None
        if self.reloader is not None:
            try:
                await self.reloader.reload(stored)
            except ReloadError as exc:
                self.stats.reload_errors += 1
                error = str(exc)
                log.error("version %d not announced: %s", stored.version, exc)
        if error is None:
            self._served = stored
        if self._served is None:
            return
        served = self._served
        self.stats.served_version = served.version
        event = PolicyVersion(
            policy_name=self.config.policy_name,
            policy_version=served.version,
            uri=served.uri,
            sha256=served.sha256,
            trained_on=self.state.trained_total,
            consumed=self.staleness.consumed_total + self.state.held_out,
            trainer_version=None if error is None else stored.version,
            reload_error=None if error is None else error[:2000],
        )
        await self._producer.publish(event)
        self.stats.published += 1
