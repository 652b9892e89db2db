"""The gateway's own answers, in OpenAI's error shape (``{"error": {"message", "type", "param", "code"}}``), so
a client's error handling reads them as it reads the engine's."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse


def error(status: int, message: str, *, type_: str = "invalid_request_error", code: str | None = None,
          headers: dict[str, str] | None = None, param: str | None = None) -> JSONResponse:  # fmt: skip
    body: dict[str, Any] = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def upstream_failure(exc: BaseException) -> tuple[int, str]:
    """The status and code for an upstream that failed: 504 ``upstream_timeout`` when it stayed silent past
    ``--upstream-timeout`` (or a counting call's limit), else 502 ``upstream_failed`` (refused, reset, not HTTP)."""
    return (504, "upstream_timeout") if isinstance(exc, TimeoutError) else (502, "upstream_failed")


def upstream_error(exc: BaseException, doing: str, headers: dict[str, str] | None = None) -> JSONResponse:
    status, code = upstream_failure(exc)
    what = "did not answer in time" if status == 504 else "failed"
    return error(status, f"upstream {what} {doing}: {type(exc).__name__}", type_="upstream_error", code=code,
                 headers=headers)  # fmt: skip
