"""The refusal memo (app/queue/refusals.py): held no longer than the wait, nor than MEMO_S."""

from __future__ import annotations

import pytest

from app.errors import LimitExceeded
from app.queue import refusals
from app.queue.refusals import Refusals


def rate_refusal(tenant_id: str, retry_after_s: float) -> LimitExceeded:
    return LimitExceeded(tenant_id=tenant_id, limit="rate", quota=1, retry_after_s=retry_after_s, window_s=100)


def test_a_long_wait_is_remembered_for_a_second_at_most() -> None:
    now = [0.0]
    memo = Refusals(clock=lambda: now[0])
    memo.remember("create", rate_refusal("t", 100.0))  # an operator may raise the limit meanwhile
    now[0] = 0.5
    with pytest.raises(LimitExceeded) as held:
        memo.check("t", "create")
    assert (held.value.limit, held.value.quota, held.value.window_s, held.value.retry_after_s) == ("rate", 1, 100, 0.5)
    memo.check("t", "stream")  # the kinds are apart
    memo.check("u", "create")
    now[0] = refusals.MEMO_S
    memo.check("t", "create")


def test_expired_refusals_are_dropped_when_many_are_held(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(refusals, "PRUNE_AT", 3)
    now = [0.0]
    memo = Refusals(clock=lambda: now[0])
    for tenant in ("a", "b", "c"):
        memo.remember("create", rate_refusal(tenant, 0.1))
    now[0] = 0.2
    memo.remember("create", rate_refusal("d", 0.5))
    assert len(memo) == 1
