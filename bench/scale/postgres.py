"""The harness's PostgreSQL, run inside the database host: ``python -m bench.scale.postgres DIR
ADDRESS PORT``. An initdb'd cluster of its own from the embedded wheel (fsync on), listening on
the bridge address only, trusting its subnet; stopped by SIGTERM."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

from app.db.embedded import EmbeddedPostgres

SETTINGS = {
    "max_connections": "900",
    "shared_buffers": "512MB",
    "shared_preload_libraries": "pg_stat_statements",  # claims are counted from its calls
    "track_commit_timestamp": "on",  # SSE latency from each event's commit
    "idle_in_transaction_session_timeout": "60s",
}


def main() -> None:
    data, address, port = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    server = EmbeddedPostgres(data, port=port, host=address, database="runq", settings=SETTINGS)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print(server.start(), flush=True)
    try:
        stop.wait()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
