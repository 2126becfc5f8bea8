"""The contract's invariants over runs and their event logs (docs/contract.md, sections 1, 3 and 6), counted.

Counted rather than asserted: the soak checks thousands of runs and prints how many broke each
invariant (all zero, or the figures say what broke), while a worker test asserts one run's log
through :func:`tests.worker_support.check_event_log`, which uses :func:`event_log_violations`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.domain import Event, Run, Status

TERMINAL_EVENTS = frozenset({"run.completed", "run.cancelled", "run.failed"})

# Failures that make a run dead at once, whatever attempts it has left (docs/contract.md, section 1, "fatal error").
FATAL_CODES = frozenset(
    {"fatal_error", "budget_exceeded", "deadline_exceeded", "unknown_agent", "invalid_input", "invalid_data"}
)
EXAMPLES_PER_KIND = 5

# The invariants the soak reports, in the order it prints them; every count must be zero.
INVARIANTS = (
    "runs_lost",
    "runs_unknown",
    "runs_not_terminal",
    "two_terminal_events",
    "fenced_writes",
    "seq_gaps_or_duplicates",
    "log_malformed",
    "dead_with_attempts_left",
    "cancels_not_honoured",
    "cancelled_without_request",
    "effects_repeated",
    "wrong_output",
    "bad_data_not_isolated",
)


def event_log_violations(events: Sequence[Event], *, finished: bool) -> list[tuple[str, str]]:
    """``(invariant, detail)`` for everything wrong with one run's log, in seq order.

    An execution starts at a ``run.queued`` (the first event, and each admin requeue). Within
    one: attempts start at 1 and go up by one per ``run.started``; once an attempt has started,
    no event of an older attempt may follow (fencing); at most one terminal event, and nothing
    after it. ``finished``: the run is terminal, so its last execution must end with one.
    """
    found: list[tuple[str, str]] = []
    seqs = [e.seq for e in events]
    if seqs != list(range(1, len(events) + 1)):
        found.append(("seq_gaps_or_duplicates", f"seqs {seqs}"))
    if not events:
        return [*found, ("log_malformed", "no events at all")]
    if events[0].type != "run.queued":
        found.append(("log_malformed", f"first event is {events[0].type}"))
    current, terminals, terminal_seq = 0, 0, None
    for event in events:
        if event.type == "run.queued" and event.seq > 1:
            if terminal_seq is None:
                found.append(("log_malformed", f"seq {event.seq}: requeued before a terminal event"))
            current, terminals, terminal_seq = 0, 0, None
            continue
        if terminal_seq is not None:
            found.append(("log_malformed", f"seq {event.seq} ({event.type}) after the terminal event"))
        if event.type == "run.started":
            if event.attempt != current + 1:
                found.append(("log_malformed", f"seq {event.seq}: attempt {event.attempt} after {current}"))
            current = max(current, event.attempt)
        elif event.attempt not in (0, current):
            found.append(
                ("fenced_writes", f"seq {event.seq} ({event.type}) of attempt {event.attempt} after attempt {current} started")
            )
        if event.type in TERMINAL_EVENTS:
            terminals += 1
            terminal_seq = event.seq
            if terminals == 2:
                found.append(("two_terminal_events", f"seq {event.seq}: a second {event.type}"))
    if finished and terminal_seq is None:
        found.append(("log_malformed", "the run is terminal but its log has no terminal event"))
    return found


@dataclass
class Findings:
    """Violations by invariant, with a few examples of each, and informational counters."""

    violations: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    info: Counter[str] = field(default_factory=Counter)

    def add(self, invariant: str, run_id: object, detail: str) -> None:
        self.violations[invariant] += 1
        shown = self.examples.setdefault(invariant, [])
        if len(shown) < EXAMPLES_PER_KIND:
            shown.append(f"{run_id}: {detail}")

    def note(self, kind: str, run_id: object, detail: str) -> None:
        """An example of something allowed but worth a look (a cancel that lost a race)."""
        shown = self.examples.setdefault(f"note:{kind}", [])
        if len(shown) < EXAMPLES_PER_KIND:
            shown.append(f"{run_id}: {detail}")

    def counts(self) -> dict[str, int]:
        return {name: self.violations.get(name, 0) for name in (*INVARIANTS, *sorted(set(self.violations) - set(INVARIANTS)))}


@dataclass(frozen=True)
class Expectation:
    """What the test's history says about one run: created (acked), cancel sent, cancel acked."""

    input: Mapping[str, Any]
    cancel_sent: bool = False
    cancel_acked: bool = False
    # a demo run that waits (docs/waits.md): the value the test resumed it with, if it did;
    # a wait the test never answers must have timed out
    resumed_with: Any = None


def check_runs(
    expected: Mapping[Any, Expectation],
    runs: Iterable[Run],
    events: Mapping[Any, Sequence[Event]],
    effects: Mapping[Any, Mapping[str, int]],
) -> Findings:
    """Every invariant over the history (``expected``) and what the database holds.

    ``effects`` maps a run to its ledger records, key → the attempt that committed it.
    """
    findings = Findings()
    stored = {run.id: run for run in runs}
    for run_id in expected.keys() - stored.keys():
        findings.add("runs_lost", run_id, "acknowledged by the API, not in the database")
    for run_id in stored.keys() - expected.keys():
        findings.add("runs_unknown", run_id, "in the database, never acknowledged to the test")
    for run_id, run in stored.items():
        log = list(events.get(run_id, ()))
        for invariant, detail in event_log_violations(log, finished=run.is_terminal):
            findings.add(invariant, run_id, detail)
        if log and log[-1].seq != run.last_event_seq:
            findings.add("seq_gaps_or_duplicates", run_id, f"last seq {log[-1].seq}, row says {run.last_event_seq}")
        if not run.is_terminal:
            findings.add("runs_not_terminal", run_id, f"still {run.status.value}")
        _check_outcome(findings, run, log, expected.get(run_id))
        _check_effects(findings, run, log, effects.get(run_id, {}))
        findings.info[f"status_{run.status.value}"] += 1
        findings.info["attempts_total"] += run.attempts
        if run.attempts > 1:
            findings.info["runs_retried"] += 1
    return findings


def _check_outcome(findings: Findings, run: Run, log: Sequence[Event], expectation: Expectation | None) -> None:
    if run.status is Status.DEAD:
        fatal = run.error_code in FATAL_CODES
        if run.attempts - run.wait_count < run.max_attempts and not fatal:  # waits are no failures
            findings.add(
                "dead_with_attempts_left",
                run.id,
                f"{run.error_code} at attempt {run.attempts} of {run.max_attempts}",
            )
        findings.info[f"dead_{run.error_code}"] += 1
    if expectation is None:
        return
    if "kind" in expectation.input:  # a run of bad data (tests/chaos/agents.py BadDataAgent)
        if (run.status, run.error_code) != (Status.DEAD, "invalid_data"):
            findings.add("bad_data_not_isolated", run.id, f"{run.status.value} {run.error_code}, not dead invalid_data")
        return
    if run.status is Status.CANCELLED and not expectation.cancel_sent:
        findings.add("cancelled_without_request", run.id, f"reason {run.cancel_reason}")
    if expectation.cancel_acked:
        _check_cancel(findings, run, log)
    if run.status is Status.DONE:
        want = {"text": str(expectation.input.get("prompt") or ""), "steps": int(expectation.input.get("steps", 3))}
        if expectation.input.get("wait"):
            answered = expectation.resumed_with is not None
            want |= {"resumed_with": expectation.resumed_with} if answered else {"timed_out": True}
        if run.output != want:
            findings.add("wrong_output", run.id, f"output {run.output!r}, expected {want!r}")


def _check_cancel(findings: Findings, run: Run, log: Sequence[Event]) -> None:
    """A 202 on cancel: the request is stored, no attempt starts after it, and the run ends
    cancelled, unless the attempt that was running had already finished its work (a completion
    or a fatal failure racing the request, which the contract lets win)."""
    if run.cancel_requested_at is None:
        findings.add("cancels_not_honoured", run.id, "acknowledged but not stored")
        return
    requested = next((e.seq for e in log if e.type == "run.cancel_requested"), None)
    if requested is None:
        findings.add("cancels_not_honoured", run.id, "no run.cancel_requested event")
        return
    restarted = [e.attempt for e in log if e.type == "run.started" and e.seq > requested]
    if restarted:
        findings.add("cancels_not_honoured", run.id, f"attempt {restarted[0]} started after the cancel request")
    elif run.status is Status.CANCELLED:
        findings.info["cancels_honoured"] += 1
    elif run.is_terminal:
        findings.info[f"cancels_raced_by_{run.status.value}"] += 1
        terminal = log[-1]
        cancel_event = next(e for e in log if e.seq == requested)
        findings.note(
            "cancels_raced",
            run.id,
            f"{terminal.type} {(terminal.created_at - cancel_event.created_at).total_seconds():.3f} s after the"
            f" request, events between: {[e.type for e in log if requested < e.seq < terminal.seq]}",
        )
        if run.status is Status.DEAD and run.error_code not in FATAL_CODES:
            findings.add("cancels_not_honoured", run.id, f"dead ({run.error_code}) instead of cancelled")
    else:
        findings.add("cancels_not_honoured", run.id, f"still {run.status.value}")


def _check_effects(findings: Findings, run: Run, log: Sequence[Event], ledger: Mapping[str, int]) -> None:
    """Once an effect's record is committed by attempt k, no later attempt performs it again."""
    for event in log:
        if event.type != "tool.result" or event.data.get("name") != "effect":
            continue
        key = str((event.data.get("output") or {}).get("key"))
        recorded_by = ledger.get(key)
        if event.data.get("replayed"):
            findings.info["effects_replayed_from_ledger"] += 1
            if recorded_by is None:
                findings.add("effects_repeated", run.id, f"{key!r} replayed but no record exists")
        elif recorded_by is not None and event.attempt > recorded_by:
            findings.add("effects_repeated", run.id, f"{key!r} performed by attempt {event.attempt}, recorded by {recorded_by}")
        else:
            findings.info["effects_performed"] += 1
