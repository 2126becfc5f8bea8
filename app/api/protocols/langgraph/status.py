"""runq's run and thread states as LangGraph's server names them (DESIGN §17): a run paused
by ``interrupt()`` ended (``success``) and left its thread ``interrupted``; a cancelled run is
``interrupted``; a rolled-back one is gone from these routes."""

from __future__ import annotations

from typing import Literal

from app.domain import Run, Status, Thread

RunStatus = Literal["pending", "running", "success", "error", "timeout", "interrupted"]
ThreadStatus = Literal["idle", "busy", "interrupted", "error"]

_RUN_STATUS: dict[Status, RunStatus] = {
    Status.PENDING: "pending",
    Status.LEASED: "running",
    Status.WAITING: "running",
    Status.DONE: "success",
    Status.DEAD: "error",
    Status.CANCELLED: "interrupted",
}


def run_status(run: Run) -> RunStatus:
    if run.status is Status.DEAD and run.error_code == "timeout":
        return "timeout"
    return _RUN_STATUS[run.status]


def rolled_back(run: Run) -> bool:
    """A run a ``rollback`` undid: LangGraph's server deletes it, so these routes hide it."""
    return run.status is Status.CANCELLED and run.cancel_reason == "rolled_back"


def paused(run: Run | None) -> bool:
    """The run ended at an ``interrupt()`` or an ``interrupt_before/after`` point."""
    output = run.output if run is not None and run.status is Status.DONE else None
    return isinstance(output, dict) and bool(output.get("interrupts") or output.get("next"))


def thread_status(thread: Thread, last: Run | None) -> ThreadStatus:
    if thread.busy:
        return "busy"
    if last is not None and last.status is Status.DEAD:
        return "error"
    return "interrupted" if paused(last) else "idle"
