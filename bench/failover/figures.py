"""The figures of one failover round, from what the clients saw and what the database kept.

Pure functions of their inputs (tested in tests/unit/test_failover_figures.py): the harness
gathers the records, these say what they mean.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

TERMINAL = frozenset({"run.completed", "run.failed", "run.cancelled"})


@dataclass
class Stream:
    """What one SSE follower saw of one run, over however many connections it took."""

    run_id: str
    seen: list[tuple[int, str]] = field(default_factory=list)  # (seq, type) in arrival order
    arrivals: list[float] = field(default_factory=list)  # time.time() of each, in the same order
    connections: int = 0

    @property
    def resumed(self) -> bool:
        return self.connections > 1

    @property
    def finished(self) -> bool:
        return any(kind in TERMINAL for _, kind in self.seen)

    def gapless(self) -> bool:
        """Every seq from 1 up, each once, in order: a resume neither skipped nor repeated one."""
        return [seq for seq, _ in self.seen] == list(range(1, len(self.seen) + 1))


@dataclass(frozen=True, slots=True)
class Timeline:
    """``time.time()`` instants of one round; None where it never happened."""

    fault_at: float
    promoted_at: float | None  # Patroni's REST said the other node is the leader
    writable_at: float | None  # a commit on the new primary returned
    created_at: float | None  # the first 201 after the fault, once writes failed
    ready_at: float | None  # /readyz 200 on every API again


def recovery(t: Timeline) -> dict[str, float | None]:
    """Seconds: the takeover (Patroni's and the database's), and runq's after the database's."""

    def since(start: float | None, end: float | None) -> float | None:
        return None if start is None or end is None else round(max(end - start, 0.0), 2)

    return {
        "takeover_s": since(t.fault_at, t.promoted_at),
        "writable_s": since(t.fault_at, t.writable_at),
        "creates_back_after_writable_s": since(t.writable_at, t.created_at),
        "readyz_back_after_writable_s": since(t.writable_at, t.ready_at),
    }


def acknowledged_but_lost(acknowledged: Iterable[str], stored: set[str]) -> list[str]:
    """Runs a client got a 201 (or 200 for its key) for, which the database does not hold."""
    return sorted(run_id for run_id in set(acknowledged) if run_id not in stored)


def seen_but_lost(streams: Iterable[Stream], stored: Mapping[str, Mapping[int, str]]) -> int:
    """Events a follower saw that the database does not hold (same seq, same type)."""
    return sum(
        1 for s in streams for seq, kind in s.seen if stored.get(s.run_id, {}).get(seq) != kind
    )


def in_flight_back(streams: Iterable[Stream], *, fault_at: float, writable_at: float | None) -> dict[str, object]:
    """The followed runs still in flight once writes were accepted again (an event before the
    fault, none of their end before writes were back), and the longest a follower of one
    waited, from then, for its next event."""
    back_at = writable_at if writable_at is not None else fault_at
    waits = []
    for s in streams:
        if not s.arrivals or s.arrivals[0] >= fault_at or (s.finished and s.arrivals[-1] < back_at):
            continue
        after = [t for t in s.arrivals if writable_at is not None and t >= writable_at]
        waits.append(round(after[0] - writable_at, 2) if after and writable_at is not None else None)
    known = [w for w in waits if w is not None]
    return {"runs": len(waits), "max_s": max(known) if len(known) == len(waits) and known else None}


def started_twice(starts: Mapping[str, int]) -> list[str]:
    """Runs with more than one ``run.started``: a claim made again (at-least-once did its job,
    but a failover shorter than the lease should cause none)."""
    return sorted(run_id for run_id, n in starts.items() if n > 1)


def streams_summary(streams: Sequence[Stream]) -> dict[str, int]:
    return {
        "followed": len(streams),
        "finished": sum(s.finished for s in streams),
        "resumed": sum(s.resumed for s in streams),
        "with_gap_or_repeat": sum(not s.gapless() for s in streams),
    }


def table(rounds: Mapping[str, Mapping[str, object]]) -> str:
    """The rounds side by side, one line per figure, as the docs show them."""
    rows = [
        ("Patroni's takeover (s after the fault)", "takeover_s"),
        ("writes accepted again (s after the fault)", "writable_s"),
        ("creates back (s after writes accepted)", "creates_back_after_writable_s"),
        ("/readyz back (s after writes accepted)", "readyz_back_after_writable_s"),
        ("runs in flight: next event (s after writes accepted, slowest)", "in_flight"),
        ("creates acknowledged", "acknowledged"),
        ("acknowledged but lost", "acknowledged_but_lost"),
        ("events seen by followers but lost", "seen_but_lost"),
        ("runs started twice", "started_twice"),
        ("streams followed / resumed / with a gap", "streams"),
        ("5xx answers", "status_5xx"),
        ("503 answers", "status_503"),
    ]
    names = list(rounds)
    lines = ["| figure | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    for label, key in rows:
        lines.append(f"| {label} | " + " | ".join(_cell(rounds[n].get(key)) for n in names) + " |")
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, Mapping) and "max_s" in value:
        return f"{_cell(value['max_s'])} ({value['runs']} runs)"
    if isinstance(value, Mapping):
        return f"{value['followed']} / {value['resumed']} / {value['with_gap_or_repeat']}"
    if isinstance(value, list):
        return str(len(value))
    return "n/a" if value is None else str(value)
