"""Any JSON value round-trips through the columns that hold one (jsonb): a string that is
itself JSON text ("123", "[1]") comes back as that string, not as what it spells, and a string
that is not JSON text ("yes") comes back at all. The driver decodes jsonb; nothing decodes twice.
"""

from __future__ import annotations

from typing import Any

import pytest

from app.domain import Finish, Status, Wait
from app.queue import NewRun, Queue

VALUES: list[Any] = ["yes", "123", "[1, 2]", '{"a": 1}', "", 7, 2.5, True, None, [1, "2"], {"k": "v"}]


@pytest.mark.parametrize("value", VALUES, ids=repr)
async def test_output_effect_checkpoint_and_resume_value_round_trip(queue: Queue, value: Any) -> None:
    run, _ = await queue.enqueue(NewRun(tenant_id="t1", agent="demo", input={}))
    (first,) = await queue.claim_batch(worker_id="w1", limit=1)
    await queue.record_effect(run_id=run.id, lease_id=first.lease_id, key="k", result=value)
    assert await queue.effects_of(run.id) == {"k": value}

    wait = Wait(name="approval", occurrence=1, payload=value, timeout_s=60.0, checkpoint={"state": value, "waits": {}})
    await queue.finish(run_id=run.id, lease_id=first.lease_id, finish=Finish.waiting(wait))
    await queue.resume(run.id, tenant_id="t1", value=value, waitpoint_id=wait.waitpoint_id)
    recorded = await queue.find_waitpoint(run_id=run.id, name="approval", occurrence=1)
    assert recorded is not None and recorded.value == value

    (second,) = await queue.claim_batch(worker_id="w1", limit=1)
    assert second.resume_state == {"state": value, "waits": {}}
    done = await queue.finish(run_id=run.id, lease_id=second.lease_id, finish=Finish.done(value))
    assert done.status is Status.DONE and done.output == value
    assert (await queue.get_run(run.id, tenant_id="t1")).output == value
