"""The LISTEN/NOTIFY channels: where they are named, for the statements and the listeners.

NOTIFY only wakes; the tables stay the truth, so a lost notification costs latency, never a run.
"""

import hashlib

EVENTS = "runq_events"  # payload "<run_id>:<last_seq>[,<run_id>:<last_seq>…]": wakes SSE followers
RUNS = "runq_runs"  # wakes every idle worker; never carries work (see runq_wake_workers)
CANCEL = "runq_cancel"  # payload "<run_id>": a cancel for a leased run
WEBHOOKS = "runq_webhooks"  # wakes webhook senders; the outbox trigger (migration 0019) names it too


def wake(worker_id: str) -> str:
    """The worker's own channel: the registry holds it, and ``runq_wake_workers()`` (migration
    0012) notifies it alone when its free slots are picked for new runs. A digest, so the name
    is a short identifier whatever the host name holds."""
    return "runq_wake_" + hashlib.sha256(worker_id.encode()).hexdigest()[:16]
