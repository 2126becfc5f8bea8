"""What the soak did, as it did it: the history the invariants are checked against.

Every entry has a wall-clock time (``at``, comparable with the database's timestamps on this
one machine) and the seconds since the soak started (``t``). The operations are recorded as a
client sees them: a create or a cancel is *sent* (perhaps more than once, through outages) and
then *acknowledged* with the API's answer; a fault is recorded when it is injected and, for the
zombie, when it ends.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.invariants import Expectation


@dataclass
class History:
    started_at: float = field(default_factory=time.time)
    entries: list[dict[str, Any]] = field(default_factory=list)
    # run id → its input and what was asked of it, built from the entries as they come
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def record(self, op: str, **fields: Any) -> dict[str, Any]:
        now = time.time()
        entry = {"t": round(now - self.started_at, 3), "at": now, "op": op, **fields}
        self.entries.append(entry)
        return entry

    def created(self, run_id: str, *, key: str, input: dict[str, Any], max_attempts: int, tries: int) -> None:
        self.record("create_ok", run_id=run_id, key=key, tries=tries)
        self.runs[run_id] = {"input": input, "max_attempts": max_attempts}

    def cancel_sent(self, run_id: str, *, seen: str | None) -> None:
        self.record("cancel_sent", run_id=run_id, seen_status=seen)
        self.runs[run_id]["cancel_sent"] = True

    def cancel_answered(self, run_id: str, *, http_status: int, run_status: str | None) -> None:
        self.record("cancel_answer", run_id=run_id, http_status=http_status, run_status=run_status)
        if http_status == 202:
            self.runs[run_id]["cancel_acked"] = run_status

    def resumed(self, run_id: str, *, value: Any, http_status: int) -> None:
        """A resume answered: 202 (this one won) or 409 (an earlier try whose answer was lost did)."""
        self.record("resume_answer", run_id=run_id, http_status=http_status)
        self.runs[run_id]["resumed_with"] = value

    def fault(self, kind: str, **fields: Any) -> None:
        self.record("fault", kind=kind, **fields)

    def faults(self) -> Counter[str]:
        return Counter(e["kind"] for e in self.entries if e["op"] == "fault")

    def expectations(self) -> dict[uuid.UUID, Expectation]:
        return {
            uuid.UUID(run_id): Expectation(
                input=run["input"],
                cancel_sent=bool(run.get("cancel_sent")),
                cancel_acked=run.get("cancel_acked") is not None,
                resumed_with=run.get("resumed_with"),
            )
            for run_id, run in self.runs.items()
        }

    def cancels_acked_by_status(self) -> Counter[str]:
        """How the 202s found their runs: ``cancelled`` (was pending) or ``leased`` (running)."""
        return Counter(str(run["cancel_acked"]) for run in self.runs.values() if run.get("cancel_acked"))

    def dump(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as out:
            for entry in self.entries:
                out.write(json.dumps(entry, default=str) + "\n")
