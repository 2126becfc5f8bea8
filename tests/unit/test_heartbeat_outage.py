"""A heartbeat that cannot reach the database stops its runs once their leases may have expired."""

from __future__ import annotations

import socket
import threading
import uuid

from app.domain import WorkerInfo
from app.worker.lease import Heartbeat


class Holder:
    def __init__(self) -> None:
        self.lease_id = uuid.uuid4()
        self.lost = threading.Event()

    def lease_lost(self) -> None:
        self.lost.set()

    def cancel_requested(self) -> None:
        raise AssertionError("no cancel was requested")


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unrenewable_lease_is_given_up_after_the_lease_time() -> None:
    url = f"postgresql://postgres@127.0.0.1:{closed_port()}/runq"
    holder = Holder()
    with Heartbeat(database_url=url, worker=WorkerInfo.start(slots=1), lease_s=1.0, interval_s=0.2) as heartbeat:
        heartbeat.hold(uuid.uuid4(), holder)
        assert not holder.lost.wait(0.3)  # a short outage costs nothing
        assert holder.lost.wait(5.0)  # past the lease the run must stop
