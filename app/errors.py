"""The queue's domain errors: what the API answers as problems (app/main.py maps each to a
status and code) and what the worker turns into an ending; and :class:`Refused`, the base of
the values runq will not accept, which carry their own problem code."""

from __future__ import annotations


class QueueError(Exception):
    """Base of the queue's domain errors."""


class RunNotFound(QueueError):
    """No such run for this tenant."""


class RunFinished(QueueError):
    """The run is terminal; it cannot change any more."""


class LeaseLost(QueueError):
    """The claim's lease is gone: the worker must stop the run and write nothing more."""


class NotWaiting(QueueError):
    """The run is not waiting, or the waitpoint named is not its open one."""


class IdempotencyConflict(QueueError):
    """The idempotency key was used before with a different request body."""


class NotRequeueable(QueueError):
    """Only dead or cancelled runs can be requeued."""


class InvalidData(QueueError, ValueError):
    """A value a run wanted stored that runq cannot store: JSON cannot hold it, or it is larger
    than ``RUNQ_MAX_DATA_BYTES`` once encoded. Its run fails (``invalid_data``), no other."""

    code = "invalid_data"


class DatabaseUnavailable(QueueError):
    """PostgreSQL cannot be reached right now; retry later."""


class DeliveryNotFound(QueueError):
    """No such webhook delivery (for this tenant)."""


class NotRedeliverable(QueueError):
    """The delivery is still pending: it is being sent or will be, so it cannot be sent again."""


class ScheduleNotFound(QueueError):
    """No such schedule for this tenant."""


class ThreadNotFound(QueueError):
    """No such thread for this tenant."""


class ChatIdTaken(QueueError):
    """Another thread of the tenant already has this ``chat_id``."""


class ThreadBusy(QueueError):
    """A run of the thread is in flight and the request may not wait for it."""


# What each limit is called in a 429's ``code`` and in ``runq_limited_total{limit}``.
LIMIT_CODES = {
    "rate": "rate_limited",
    "pending": "too_many_pending",
    "streams": "too_many_streams",
    "schedules": "too_many_schedules",
}


class LimitExceeded(QueueError):
    """The tenant is at one of its limits (docs/limits.md): nothing was created or opened.

    ``limit`` is ``rate``, ``pending``, ``streams`` or ``schedules``; ``quota`` the figure it is
    at (the burst for the rate, over ``window_s`` seconds); ``retry_after_s`` when trying again
    may succeed.
    """

    def __init__(self, *, tenant_id: str, limit: str, quota: float, retry_after_s: float,
                 window_s: float | None = None) -> None:
        super().__init__(f"tenant {tenant_id!r} is at its {limit} limit ({quota:g})")
        self.tenant_id = tenant_id
        self.limit = limit
        self.quota = quota
        self.retry_after_s = retry_after_s
        self.window_s = window_s

    @property
    def code(self) -> str:
        return LIMIT_CODES[self.limit]


class Refused(Exception):
    """A value runq will not accept (a schedule's timing, a webhook URL); ``code`` is the
    problem code the API answers with, ``detail`` says why."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
