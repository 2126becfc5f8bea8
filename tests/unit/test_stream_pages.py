"""A page of events becomes SSE bytes once, for every stream at that cursor."""

from __future__ import annotations

import json
import re

from app.api.stream import PAGE, encode
from app.domain import EventSlice, Status


def frames(body: bytes) -> list[dict[str, str]]:
    """Parse SSE as a browser's EventSource does: only CR, LF and CRLF end a line."""
    parsed, current = [], {}
    for line in re.split(r"\r\n|\r|\n", body.decode()):
        if not line:
            if current:
                parsed.append(current)
            current = {}
            continue
        field, _, value = line.partition(": ")
        current[field] = current[field] + "\n" + value if field in current else value
    return parsed


def test_frames_carry_the_stored_json_text_intact() -> None:
    stored = json.dumps({"text": "a\u2028b\nc é"}, ensure_ascii=False)  # jsonb::text keeps non-ASCII
    page = encode(EventSlice(Status.LEASED, 9, [(4, "message.delta", stored), (5, "tool.call", "{}")]), after=3)
    assert [f["id"] for f in frames(page.body)] == ["4", "5"]
    assert json.loads(frames(page.body)[0]["data"]) == {"text": "a\u2028b\nc é"}
    assert page.last_seq == 5 and not page.full and not page.finished


def test_a_page_is_finished_only_when_the_run_is_terminal_and_its_last_event_sent() -> None:
    done = encode(EventSlice(Status.DONE, 6, [(6, "run.completed", "{}")]), after=5)
    assert done.finished
    requeued_after_terminal = encode(EventSlice(Status.PENDING, 8, [(6, "run.completed", "{}")]), after=5)
    assert not requeued_after_terminal.finished
    caught_up = encode(EventSlice(Status.CANCELLED, 6, []), after=6)
    assert caught_up.finished and caught_up.last_seq is None and caught_up.body == b""


def test_a_terminal_run_with_nothing_after_the_cursor_is_finished_even_below_its_last_seq() -> None:
    """Retention dropped the rest of its history (its day's partition) just before its row."""
    purged = encode(EventSlice(Status.DONE, 6, []), after=2)
    assert purged.finished and purged.last_seq is None
    assert not encode(EventSlice(Status.LEASED, 6, []), after=2).finished  # still running: wait


def test_a_full_page_asks_for_more_at_once() -> None:
    events = [(seq, "message.delta", "{}") for seq in range(1, PAGE + 1)]
    page = encode(EventSlice(Status.DONE, PAGE + 1, events), after=0)
    assert page.full and not page.finished and page.last_seq == PAGE
