"""What the client raises: one base class, so ``except RunqError`` catches every failure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class RunqError(Exception):
    """An error answer of the runq API (an RFC 9457 problem with a stable ``code``)."""

    def __init__(self, status: int, code: str, detail: str, *, problem: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"{status} {code}: {detail}" if status else f"{code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.problem: dict[str, Any] = dict(problem or {})


class RunqConnectionError(RunqError):
    """The API could not be reached (or stopped answering) and retrying did not help."""

    def __init__(self, detail: str) -> None:
        super().__init__(0, "connection_error", detail)


class RunqTimeout(RunqError, TimeoutError):
    """``runs.wait`` (or a stream given a deadline) ran out of time before the run ended."""

    def __init__(self, detail: str) -> None:
        super().__init__(0, "timeout", detail)
