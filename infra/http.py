"""What our OpenAI-compatible HTTP servers share: the error body and the bearer check."""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse


def openai_error(status: int, message: str) -> JSONResponse:
    """An OpenAI-style error body."""
    return JSONResponse({"error": {"message": message, "code": status}}, status_code=status)


async def json_object(request: Request) -> dict[str, Any] | JSONResponse:
    """The request's JSON object body, or the 400 answer saying why it is not one."""
    try:
        body = await request.json()
    except json.JSONDecodeError as exc:
        return openai_error(400, f"body is not JSON ({exc})")
    if not isinstance(body, dict):
        return openai_error(400, "body must be a JSON object")
    return body


def require_bearer(app: FastAPI, token: str | None) -> None:
    """With ``token``, every request to ``app`` must carry ``Authorization: Bearer <token>``."""
    if not token:
        return

    @app.middleware("http")
    async def _auth(request: Request, call_next: Any) -> Any:
        if request.headers.get("authorization") != f"Bearer {token}":
            return openai_error(401, "missing or wrong bearer token")
        return await call_next(request)
