"""Pre-warmed environments and concurrent episodes.

:class:`EnvPool` keeps ``size`` environments of one kind, in use or ready: built, prepared
(for the OS env: sandbox up, home seeded, clean layer frozen) and health-checked. A returned
environment is ready again if it is healthy and reusable; otherwise it is closed and a new
one is built in the background. (Building spares while every environment was in use cost
the OS env a new sandbox per episode, and closed the returned ones.)

:class:`ActorPool` runs many episodes at once (asyncio) against the pools, with bounded
concurrency and per-episode timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..schemas import Task
from .env import EnvError, Environment, TaskSpec
from .registry import make_env
from .runner import EpisodeResult, EpisodeRunner

log = logging.getLogger(__name__)
MAX_BUILD_FAILURES = 3
"""Consecutive failed builds (errors or failed health checks) after which a pool gives up."""


@dataclass
class PoolStats:
    """Counters of one pool."""

    built: int = 0
    acquired: int = 0
    reused: int = 0
    replaced: int = 0
    unhealthy: int = 0


def _build(env_name: str) -> Environment:
    env = make_env(env_name)
    prepare = getattr(env, "prepare", None)
    if prepare is not None:
        prepare()
    return env


class EnvPool:
    """``size`` environments of kind ``env_name``, in use or ready; see the module
    docstring."""

    def __init__(
        self, env_name: str, size: int = 4, factory: Callable[[], Environment] | None = None
    ) -> None:
        if size < 1:
            raise ValueError(f"EnvPool({env_name!r}): size must be >= 1, got {size}")
        self.env_name, self.size = env_name, size
        self._factory = factory or (lambda: _build(env_name))
        self._ready: asyncio.Queue[Environment] = asyncio.Queue()
        self._building = 0
        self._out = 0
        """Environments handed out and not yet returned."""
        self._wake = asyncio.Event()
        self._added = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failures = 0
        self.error: EnvError | None = None
        """Set when building failed ``MAX_BUILD_FAILURES`` times in a row; waiters raise it."""
        self.stats = PoolStats()

    async def start(self, wait: bool = True) -> EnvPool:
        """Start refilling; with ``wait``, return once ``size`` environments are ready."""
        if self._task is None:
            self._task = asyncio.create_task(self._refill(), name=f"envpool-{self.env_name}")
            self._wake.set()
        if wait:
            await self.wait_full()
        return self

    async def wait_full(self) -> None:
        """Return once ``size`` environments are ready (:class:`EnvError` if they cannot be
        built)."""
        while self._ready.qsize() < self.size:
            await self._wait_added()

    async def _wait_added(self) -> None:
        if self.error is not None:
            raise self.error
        self._added.clear()
        await self._added.wait()
        if self.error is not None:
            raise self.error

    @property
    def ready(self) -> int:
        """Environments ready to hand out now."""
        return self._ready.qsize()

    async def _refill(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._ready.qsize() + self._building + self._out < self.size:
                self._building += 1
                try:
                    env = await asyncio.to_thread(self._factory)
                    healthy = await asyncio.to_thread(env.healthy)
                except Exception as exc:
                    log.warning("building a %s environment failed: %r", self.env_name, exc)
                    self._failed(f"{type(exc).__name__}: {exc}")
                    await asyncio.sleep(0.5)
                    continue
                finally:
                    self._building -= 1
                self.stats.built += 1
                if healthy:
                    self._failures = 0
                    self._ready.put_nowait(env)
                    self._added.set()
                else:
                    self.stats.unhealthy += 1
                    self._failed("a new environment failed its health check")
                    await asyncio.to_thread(env.close)

    def _failed(self, reason: str) -> None:
        self._failures += 1
        if self._failures >= MAX_BUILD_FAILURES and self.error is None:
            self.error = EnvError(
                f"cannot build {self.env_name!r} environments: {reason} "
                f"({self._failures} attempts in a row)"
            )
            self._added.set()

    async def acquire(self) -> Environment:
        """A ready environment (waits if none is ready yet)."""
        if self._task is None:
            await self.start(wait=False)
        while self._ready.empty():
            await self._wait_added()
        env = self._ready.get_nowait()
        self.stats.acquired += 1
        self._out += 1
        return env

    async def release(self, env: Environment, reusable: bool = True) -> None:
        """Give ``env`` back: ready again if reusable and healthy, else closed (and a new
        one built)."""
        self._out -= 1
        if reusable and self._ready.qsize() + self._building + self._out < self.size:
            if await asyncio.to_thread(env.healthy):
                self.stats.reused += 1
                self._ready.put_nowait(env)
                self._added.set()
                return
            self.stats.unhealthy += 1
        self.stats.replaced += 1
        await asyncio.to_thread(env.close)
        self._wake.set()

    async def close(self) -> None:
        """Stop refilling and close every ready environment."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        while not self._ready.empty():
            await asyncio.to_thread(self._ready.get_nowait().close)


Admission = Callable[[], Awaitable[None]]


_THREADS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, int] = weakref.WeakKeyDictionary()


def enough_threads(wanted: int) -> None:
    """Give the running loop a default executor of at least ``wanted`` threads. Blocking
    environments (a sandbox's commands) run there through ``asyncio.to_thread``; its own
    size, min(32, cores + 4), ran 6 of 32 OS-shell episodes at once on 2 cores."""
    loop = asyncio.get_running_loop()
    if _THREADS.get(loop, 0) >= wanted:
        return
    loop.set_default_executor(ThreadPoolExecutor(wanted, thread_name_prefix="env"))
    _THREADS[loop] = wanted


class ActorPool:
    """Runs up to ``concurrency`` episodes at once against per-env :class:`EnvPool` s."""

    def __init__(
        self,
        runner: EpisodeRunner,
        pools: dict[str, EnvPool],
        concurrency: int = 8,
        admission: Admission | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"ActorPool: concurrency must be >= 1, got {concurrency}")
        self.runner, self.pools, self.concurrency = runner, pools, concurrency
        self._slots = asyncio.Semaphore(concurrency)
        self._admission = admission
        self.in_flight = 0

    def pool(self, env_name: str, size: int | None = None) -> EnvPool:
        """The pool for ``env_name``, created (sized to the concurrency) on first use."""
        if env_name not in self.pools:
            self.pools[env_name] = EnvPool(env_name, size or self.concurrency)
        return self.pools[env_name]

    async def run_one(
        self,
        task: Task,
        spec: TaskSpec,
        on_done: Callable[[EpisodeResult], None] | None = None,
    ) -> EpisodeResult:
        """Run one episode when a slot is free (after admission control, if any)."""
        enough_threads(2 * self.concurrency + 4)
        async with self._slots:
            if self._admission is not None:
                await self._admission()
            pool = self.pool(task.env)
            env = await pool.acquire()
            self.in_flight += 1
            try:
                result = await self.runner.run(env, task, spec)
            finally:
                self.in_flight -= 1
            await pool.release(env, reusable=result.reusable_env)
        if on_done is not None:
            on_done(result)
        return result

    async def run_many(
        self,
        work: Iterable[tuple[Task, TaskSpec]],
        on_done: Callable[[EpisodeResult], None] | None = None,
    ) -> list[EpisodeResult]:
        """Run every (task, spec) pair, ``concurrency`` at a time; results in input order."""
        return list(await asyncio.gather(*(self.run_one(t, s, on_done) for t, s in work)))

    async def close(self) -> None:
        """Close every pool."""
        for pool in self.pools.values():
            await pool.close()
