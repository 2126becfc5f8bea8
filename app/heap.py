"""The garbage collector of a long-running runq process (API or worker).

An API process holds thousands of open streams, a few hundred tracked objects each. With
CPython's default thresholds a young collection runs every 700 allocations and promotes
whatever is alive at that instant (a read's futures, a frame being sent); once promotions
reach a quarter of the heap a full collection walks all of it, and every stream of the process
stalls meanwhile. Measured in `make scale` with 2,500 streams per process all woken together
(runs in lock-step): full collections of 0.5-0.8 s with the defaults, 50-90 ms with a first
threshold of 50,000, which lets those objects die by reference count before a collection sees
them (young collections then take 30-60 ms there, and hold a few MB).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 50_000


def settle() -> None:
    """Call once start-up is done: its objects (FastAPI, pydantic, SQLAlchemy) are never
    garbage, so they leave every collection, and young collections become rare."""
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, 20, 10)
