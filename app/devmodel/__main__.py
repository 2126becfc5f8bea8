"""``python -m app.devmodel --port P``: the development model in the foreground until SIGTERM."""

from __future__ import annotations

import argparse
import signal
import threading

from app.devmodel.server import ModelServer


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m app.devmodel", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with ModelServer(host=args.host, port=args.port) as server:
        print(server.base_url, flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
