"""Latency samples (seconds) as the milliseconds the report prints."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile: with 500 samples p99 is the 495th, an observed value."""
    ordered = sorted(samples)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def summary(samples: Sequence[float]) -> dict[str, float]:
    if not samples:
        raise ValueError("no samples")
    ms = [s * 1000 for s in samples]
    return {
        "samples": len(ms),
        "p50_ms": round(percentile(ms, 50), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "mean_ms": round(statistics.fmean(ms), 2),
        "max_ms": round(max(ms), 2),
    }
