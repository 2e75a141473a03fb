"""The web app of ``safactory serve``: one static page, the live view as server-sent events,
an episode's trajectory with its verdicts (read by the caller's ``episode`` function), and
Prometheus metrics.

Routes: ``/`` and ``/episodes/{id}`` (the page; it renders the live view or the episode),
``/events`` (``text/event-stream``: a snapshot of the live view within 50 ms of a change,
at most 4 a second, and one a second while rates decay), ``/api/view`` (the snapshot once),
``/api/episodes/{id}`` (the episode as JSON), ``POST /api/control`` (``{"episode_id": ...,
"approve": true|false}``: a person's answer to a paused episode, published on ``sf.control``)
``/metrics``, and with a review desk ``/review`` (the review queue's page), ``/api/review``
(the cases to label next) and ``POST /api/labels`` (``{"id": ..., "label": "unsafe" |
"safe", "reason": ...}``: stored, published on ``sf.labels``, answered with the case's
decision now; refused unless the server has a token, so every label has a known sender).
With a token every request
must carry it, as ``Authorization: Bearer <token>`` or ``?token=<token>`` (the page passes
its own ``?token=`` on to its requests, since EventSource cannot send headers).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from starlette.responses import StreamingResponse

from ...infra.config import Settings
from ...infra.http import HttpGuard, json_object, plain_error
from ...infra.producer import EventProducer
from ...schemas import Label
from ..control import answer
from .follow import Follower
from .view import LiveView, Pace, to_json

EpisodeReader = Callable[[str], dict[str, Any]]
"""An episode id → its trace as the page shows it; LookupError: no such episode to show."""


class ReviewDesk(Protocol):
    """The review queue behind ``/review`` (``tools.review.Desk``)."""

    def queue(self) -> list[dict[str, Any]]: ...

    def answer(self, body: dict[str, Any], who: str) -> tuple[Label, dict[str, Any]]: ...


TICK_S = 0.05
"""How often an event stream looks for a change (a change waits at most this long)."""
MIN_INTERVAL_S = 0.25
"""Shortest gap between two snapshots of one stream (at most 4 a second)."""
IDLE_RESEND_S = 1.0
"""Longest an event stream goes without a snapshot (rates decay while nothing arrives)."""


def page(name: str = "index.html") -> str:
    """A static page of this package, with the script both pages share (``shared.js``)."""
    files = resources.files(__package__)
    shared = files.joinpath("shared.js").read_text(encoding="utf-8")
    return files.joinpath(name).read_text(encoding="utf-8").replace("/* shared.js */\n", shared)


def create_app(
    settings: Settings,
    *,
    episode: EpisodeReader,
    token: str | None = None,
    from_beginning: bool = False,
    window_s: float = 60.0,
    follow: bool = True,
    bound: str = "127.0.0.1",
    allow_hosts: tuple[str, ...] = (),
    review: ReviewDesk | None = None,
) -> FastAPI:
    """The app behind :class:`~...infra.http.HttpGuard`; ``follow=False`` serves without
    reading the topics (tests of the routes)."""
    view = LiveView(window_s)
    html, review_html = page(), page("review.html")
    producer = EventProducer(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if not follow:
            yield
            return
        follower = Follower(settings, view, from_beginning=from_beginning)
        await follower.start()
        await producer.start()
        try:
            yield
        finally:
            await producer.stop()
            await follower.stop()

    app = FastAPI(
        title="Safactory monitor",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.view = view
    app.add_middleware(
        HttpGuard, bound=bound, token=token, allow_hosts=allow_hosts, error=plain_error
    )

    @app.get("/", response_class=HTMLResponse)
    async def index() -> str:
        return html

    @app.get("/episodes/{episode_id}", response_class=HTMLResponse)
    async def episode_page(episode_id: str) -> str:
        return html

    @app.get("/api/view")
    async def current() -> Response:
        return Response(to_json(view.snapshot()), media_type="application/json")

    @app.get("/events")
    async def events() -> StreamingResponse:
        async def stream() -> AsyncIterator[str]:
            yield "retry: 2000\n\n"
            pace = Pace(MIN_INTERVAL_S, IDLE_RESEND_S)
            while True:
                if pace.due(view.seq, time.monotonic()):
                    yield f"data: {to_json(view.snapshot())}\n\n"
                await asyncio.sleep(TICK_S)

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    @app.post("/api/control")
    async def control(request: Request) -> Any:
        body = await json_object(request, plain_error)
        if not isinstance(body, dict):
            return body
        try:
            episode_id, approve = str(body["episode_id"]), body["approve"]
        except (KeyError, TypeError):
            return JSONResponse(
                {"error": "send {'episode_id': ..., 'approve': true or false}"}, status_code=400
            )
        paused = view.paused.get(episode_id)
        if paused is None or not isinstance(approve, bool):
            return JSONResponse({"error": f"episode {episode_id} is not paused"}, status_code=404)
        decision = answer(paused[1], approve, "serve")
        await producer.publish(decision)
        return {"control": decision.model_dump(mode="json")}

    @app.get("/review", response_class=HTMLResponse)
    async def review_page() -> str:
        return review_html

    @app.get("/api/review")
    async def review_queue() -> Any:
        if review is None:
            return JSONResponse({"error": "no review desk: serve with --db"}, status_code=404)
        return {"queue": await asyncio.to_thread(review.queue)}

    @app.post("/api/labels")
    async def labels(request: Request) -> Any:
        if review is None or token is None:
            return JSONResponse(
                {
                    "error": "labels need a token (serve --token or SF_SERVE_TOKEN), so each "
                    "label has a known sender"
                },
                status_code=403,
            )
        body = await json_object(request, plain_error)
        if not isinstance(body, dict):
            return body
        try:
            label, said = await asyncio.to_thread(review.answer, body, "serve")
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        if follow:
            await producer.publish(label)
        return said

    @app.get("/api/episodes/{episode_id}")
    def episode_trace(episode_id: str) -> Any:
        try:
            return episode(episode_id)
        except LookupError as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)

    @app.get("/metrics")
    def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        from ...infra.metrics import REGISTRY  # the one registry every component counts into

        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    return app
