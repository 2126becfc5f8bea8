"""A sans-IO Server-Sent Events decoder (the WHATWG event-stream rules), fed raw bytes.

It owns no socket, so the sync and the async client share it, and it is fed whatever a
connection delivered, cut anywhere: in the middle of a UTF-8 character, between the ``\\r`` and
the ``\\n`` of a CRLF, inside a field name. Lines end in CRLF, LF or CR alike; comments (the
server's keep-alives) produce nothing.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class ServerSentEvent:
    event: str
    data: str
    id: str | None


class SSEDecoder:
    """Bytes in, complete events out; one decoder per connection."""

    def __init__(self) -> None:
        self._text = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = ""  # an unfinished line
        self._skip_lf = False  # the last chunk ended in "\r": a leading "\n" belongs to it
        self._started = False
        self._event = ""
        self._data: list[str] = []
        self._last_id: str | None = None

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        text = self._text.decode(chunk)
        if not text:
            return []
        if not self._started:
            self._started = True
            text = text.removeprefix("\ufeff")
        if self._skip_lf:
            text = text.removeprefix("\n")
        buffer = self._partial + text
        self._skip_lf = buffer.endswith("\r")
        lines = _LINE_END.split(buffer)
        self._partial = lines.pop()
        events = []
        for line in lines:
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> ServerSentEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment: the keep-alive
        name, colon, value = line.partition(":")
        if colon:
            value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\x00" not in value:
            self._last_id = value
        return None  # "retry" and unknown fields: the client keeps its own back-off

    def _dispatch(self) -> ServerSentEvent | None:
        data, event = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return ServerSentEvent(event or "message", "\n".join(data), self._last_id)
