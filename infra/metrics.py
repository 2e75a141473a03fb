"""One Prometheus registry for every long-running worker, and where their counters live.

Design: components count into labelled registry metrics; the stats objects the code and the
CLI read (``ConsumerStats``, ``SinkStats``, ``AssemblerStats``, the trainer's
``StreamStats``...) are thin per-instance views over them (:class:`Tally`). A field such as
``received = Count("sf_records_in", ..., "topic")`` is a child of a registry counter: ``+=``
on an unkeyed field, or :meth:`Tally.count` on a keyed one, increments the registry, and
reading the field gives what was counted under this object's labels since it was made. So the
registry is the one place counters live, ``/metrics`` shows exactly what the stats say, and
nothing is counted twice. Two objects with the same labels live at once in one process
(tests only: deployments run one worker per process) see each other's counts.

Every series carries ``worker`` (audit, assemble, sink, score, skills, control, simulate, train),
set once per process by :func:`serve`; ``topic`` and ``reason`` where relevant. A worker
exposes ``/metrics`` on 127.0.0.1 when ``SF_METRICS_PORT`` (``metrics_port``) is set; the
default 0 is off, since one default port per worker kind would collide when several run on
a machine (the demo gives each its own). docs/METRICS.md lists the names.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from prometheus_client import (
    REGISTRY,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)

from .config import Settings

log = logging.getLogger(__name__)
disable_created_metrics()  # no ``*_created`` series beside every counter

WORKERS = ("audit", "assemble", "sink", "score", "skills", "control", "simulate", "train")
"""The worker kinds a ``worker`` label names (``none`` outside a worker process)."""
_worker = "none"
_families: dict[str, Any] = {}
_served: dict[int, int] = {}
"""Requested port → bound port of the /metrics servers this process started."""

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class MetricsPortBusy(SystemExit):
    """``SF_METRICS_PORT`` names a port that cannot be listened on: a configuration error
    that ends the worker with its one-line message (no traceback), even from inside the
    event loop; it is raised before the worker connects to anything."""


def worker_name() -> str:
    """The ``worker`` label of this process."""
    return _worker


def serve(settings: Settings, worker: str) -> int | None:
    """Name this process's worker (every series is labelled with it) and, if
    ``settings.metrics_port`` is set, serve ``/metrics`` on 127.0.0.1 at that port (once
    per process). Returns the port served, or None when metrics are off."""
    global _worker
    if worker not in WORKERS:
        raise ValueError(f"worker {worker!r}: choose one of {', '.join(WORKERS)}")
    _worker = worker
    for always in (PROCESSING_SECONDS, LOOP_STALL_SECONDS):  # series from the start, at 0:
        always.labels(worker=worker)  # a scrape before the first batch shows the worker
    port = settings.metrics_port
    if not port:
        return None
    if port not in _served:
        try:
            server, _ = start_http_server(port, addr="127.0.0.1", registry=REGISTRY)
        except OSError as exc:
            raise MetricsPortBusy(
                f"SF_METRICS_PORT={port}: cannot listen on 127.0.0.1:{port} ({exc.strerror}); "
                "give each worker its own free port, or 0 to turn metrics off"
            ) from None
        _served[port] = server.server_port
        log.warning("%s worker: metrics on http://127.0.0.1:%d/metrics", worker, port)
    return _served[port]


def _family(kind: type, name: str, doc: str, labels: tuple[str, ...], **extra: Any) -> Any:
    """The registry metric ``name`` (made on first use; one definition per name)."""
    metric = _families.get(name)
    if metric is None:
        metric = kind(name, doc, ("worker", *labels), registry=REGISTRY, **extra)
        _families[name] = metric
    elif metric._labelnames != ("worker", *labels):
        raise ValueError(f"metric {name} is defined with labels {metric._labelnames}")
    return metric


def _value(child: Any) -> float:
    """Current value of a counter or gauge child (prometheus_client keeps it in ``_value``)."""
    return float(child._value.get())


class Count:
    """A counter field of a :class:`Tally`: ``sf_<name>_total`` with labels ``worker`` and
    ``keys``. Unkeyed fields take ``+=``; keyed ones :meth:`Tally.count`."""

    def __init__(self, name: str, doc: str, *keys: str, kind: type = int) -> None:
        self.family = name
        self.doc = doc
        self.keys = keys
        self.kind = kind
        self.attr = name

    def __set_name__(self, owner: type, attr: str) -> None:
        self.attr = attr

    def metric(self) -> Counter:
        """The registry counter behind this field."""
        return _family(Counter, self.family, self.doc, self.keys)

    def __get__(self, obj: Tally | None, owner: type | None = None) -> Any:
        if obj is None:
            return self
        total = sum(_value(child) - base for child, base in obj._children(self).values())
        return self.kind(total)

    def __set__(self, obj: Tally, value: float) -> None:
        if self.keys:
            raise TypeError(f"{self.attr} is counted per {'/'.join(self.keys)}: use count()")
        obj.count(self.attr, value - self.__get__(obj))


class Level:
    """A gauge field of a :class:`Tally`: ``sf_<name>`` with label ``worker``; assignment
    sets it, reading gives the registry's value."""

    def __init__(self, name: str, doc: str) -> None:
        self.family = name
        self.doc = doc

    def _child(self) -> Any:
        return _family(Gauge, self.family, self.doc, ()).labels(worker=_worker)

    def __get__(self, obj: Tally | None, owner: type | None = None) -> Any:
        return self if obj is None else _value(self._child())

    def __set__(self, obj: Tally, value: float) -> None:
        self._child().set(value)


class Tally:
    """Base of a component's stats: a per-instance view over registry counters (see the
    module docstring). Subclasses declare :class:`Count` and :class:`Level` fields."""

    _fields: ClassVar[dict[str, Count]] = {}
    _shown: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        every = {n: v for k in reversed(cls.__mro__) for n, v in vars(k).items()}
        cls._fields = {n: v for n, v in every.items() if isinstance(v, Count)}
        cls._shown = tuple(n for n, v in every.items() if isinstance(v, Count | Level))

    def __init__(self) -> None:
        self._seen: dict[tuple[str, tuple[str, ...]], tuple[Any, float]] = {}
        """(field, key values) → (registry child, its value when this view first used it)."""

    def count(self, attr: str, n: float = 1, **keys: str) -> None:
        """Count ``n`` more under field ``attr`` (and the field's ``keys``)."""
        if n < 0:
            raise ValueError(f"{attr}: a counter only goes up (got {n})")
        field = self._fields[attr]
        values = tuple(str(keys[k]) for k in field.keys)
        seen = self._seen.get((attr, values))
        if seen is None:
            child = field.metric().labels(_worker, *values)
            seen = self._seen[(attr, values)] = (child, _value(child))
        seen[0].inc(n)

    def by(self, attr: str) -> dict[str, Any]:
        """Field ``attr`` per value of its (first) key, as counted by this view."""
        field = self._fields[attr]
        out: dict[str, Any] = {}
        for (name, values), (child, base) in self._seen.items():
            if name == attr:
                out[values[0]] = out.get(values[0], 0) + field.kind(_value(child) - base)
        return out

    def _children(self, field: Count) -> dict[tuple[str, ...], tuple[Any, float]]:
        return {v: cb for (name, v), cb in self._seen.items() if name == field.attr}

    def as_dict(self) -> dict[str, Any]:
        """Every field's value."""
        return {name: getattr(self, name) for name in self._shown}

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in self.as_dict().items())
        return f"{type(self).__name__}({shown})"


PROCESSING_SECONDS = Histogram(
    "sf_processing_seconds",
    "seconds a worker took to handle one polled batch",
    ("worker",),
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
LAG = Gauge(
    "sf_consumer_lag",
    "records between the last one handled and the partition's end, as of that batch",
    ("worker", "topic", "partition"),
    registry=REGISTRY,
)
LOOP_STALL_SECONDS = Histogram(
    "sf_loop_stall_seconds",
    "how late the event loop woke a timer (held by synchronous work or a stopped process)",
    ("worker",),
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
    registry=REGISTRY,
)
TRAINER_LOSS = Gauge("sf_trainer_loss", "loss of the latest update", ("worker",), registry=REGISTRY)
TRAINER_TOKENS_PER_S = Gauge(
    "sf_trainer_tokens_per_second",
    "tokens per second of the latest update (forward and backward)",
    ("worker",),
    registry=REGISTRY,
)


@contextmanager
def timed() -> Iterator[None]:
    """Observe the block's duration in ``sf_processing_seconds``."""
    with PROCESSING_SECONDS.labels(_worker).time():
        yield


def loop_stalled(seconds: float) -> None:
    """Record how late the event loop woke a timer (``aio.LoopWatch``)."""
    LOOP_STALL_SECONDS.labels(_worker).observe(seconds)


def trained(loss: float, tokens_per_s: float) -> None:
    """Record the latest trainer update's loss and throughput."""
    TRAINER_LOSS.labels(_worker).set(loss)
    TRAINER_TOKENS_PER_S.labels(_worker).set(tokens_per_s)


def set_lag(topic: str, partition: int, records: int) -> None:
    """Record a partition's lag as of the batch just handled."""
    LAG.labels(_worker, topic, str(partition)).set(records)


def records_out() -> Count:
    """A field counting into ``sf_records_out_total`` (records published, per ``topic``)."""
    return Count("sf_records_out", "records a worker published, per topic", "topic")


class Published(Tally):
    """Records a worker published, per topic (``sf_records_out_total``)."""

    out = records_out()

    def sent(self, topic: str, n: int = 1) -> None:
        """Count ``n`` records published to ``topic``."""
        self.count("out", n, topic=topic)
