"""How one attempt's values become what its statements carry: redacted, then JSON text, each
checked on its own before it joins a batch of other runs' writes (docs/reliability.md, "Faults
stay where they start"). A value that cannot be stored raises :class:`InvalidData` here, in its
own run's call; the attempt ends that run (app/worker/attempt.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.errors import InvalidData
from app.guards.redact import Redactor
from app.queue import EncodedEvents, encode
from app.worker.events import DELTA, PendingEvent


class Encoder:
    """One attempt's: its redactor, the largest value it may store, the checkpoint it started from."""

    def __init__(self, redactor: Redactor, *, limit: int, saved: Mapping[str, Any]) -> None:
        self._redactor = redactor
        self.limit = limit
        self._saved = saved

    def value(self, value: Any, *, what: str, redact: bool = True) -> str:
        """``value`` as JSON text (redacted unless ``redact`` is false: an effect's record is
        replayed as it was returned); :class:`InvalidData` names ``what`` it was."""
        if not redact:
            return encode(value, what=what, limit=self.limit)
        # Refused before the redactor walks it: a value of hundreds of MB would take seconds.
        encode(value, what=what, limit=self.limit)
        return encode(self._redactor.data(value), what=what, limit=self.limit)

    def delta(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """A token's data, kept as a dict to be merged with the next ones and encoded when written
        (:meth:`events`): what could not be stored is refused now, as any other event's."""
        delta = dict(data)
        text = delta.get("text")
        # a character is at most six bytes of JSON: most tokens need no encoding to be known good
        if len(delta) > 1 or not isinstance(text, str) or len(text) * 6 > self.limit:
            self.value(delta, what=f"the data of a {DELTA!r} event")
        return delta

    def events(self, events: list[PendingEvent]) -> EncodedEvents:
        """A buffer's events as a statement carries them: the tokens it merged are redacted and
        encoded now, every other event was when it was emitted."""
        return [
            (type, data if isinstance(data, str) else self.value(data, what=f"the data of a {type!r} event"))
            for type, data in events
        ]

    def checkpoint(self, state: str | None, waits: Mapping[str, int]) -> str:
        """A checkpoint as stored: the agent's ``state`` (JSON text; ``None``: the one the attempt
        started from) and the waits passed (docs/waits.md)."""
        if state is None:
            state = encode(self._saved.get("state"), what="a checkpoint", limit=self.limit)
        return f'{{"state":{state},"waits":{encode(dict(waits), what="a checkpoint")}}}'


__all__ = ["Encoder", "InvalidData"]
