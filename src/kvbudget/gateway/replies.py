"""The gateway's own answers, in OpenAI's error shape (``{"error": {"message", "type", "param", "code"}}``), so
a client's error handling reads them as it reads the engine's."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse


def error(status: int, message: str, *, type_: str = "invalid_request_error", code: str | None = None,
          headers: dict[str, str] | None = None, param: str | None = None) -> JSONResponse:  # fmt: skip
    body: dict[str, Any] = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)
