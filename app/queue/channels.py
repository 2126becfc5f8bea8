"""The LISTEN/NOTIFY channels: where they are named, for the statements and the listeners.

NOTIFY only wakes; the tables stay the truth, so a lost notification costs latency, never a run.
"""

EVENTS = "runq_events"  # payload "<run_id>:<last_seq>[,<run_id>:<last_seq>…]": wakes SSE followers
RUNS = "runq_runs"  # wakes idle workers; never carries work
CANCEL = "runq_cancel"  # payload "<run_id>": a cancel for a leased run
WEBHOOKS = "runq_webhooks"  # wakes webhook senders; the outbox trigger (migration 0006) names it too
