"""``runq dev`` / ``make run``: embedded PostgreSQL, migrations, the API and one worker.

The API and the worker run as child processes, as in production, sharing the database URL and
one secret key (so stream tokens issued by the API verify in any API process). With no model
configured (neither ``RUNQ_OPENAI_BASE_URL`` nor ``RUNQ_OPENAI_API_KEY``), the development model
(app/devmodel/) serves on 127.0.0.1 from this process and the children are pointed at it, so
every walkthrough runs without a key. Ctrl-C or SIGTERM stops the children first (the worker
gets its whole ``RUNQ_SHUTDOWN_GRACE_S``, so runs in flight finish or are released rather than
left leased), then the model and the embedded server.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import httpx

from app.agents.registry import start_agents
from app.cli.dev_banner import Banner
from app.cli.dev_key import DEV_KEY_FILE, dev_key
from app.db.migrate import upgrade
from app.db.runtime import Database, data_dir, open_database
from app.devmodel.endpoint import dev_model_env, model_configured, use_dev_model
from app.devmodel.server import ModelServer
from app.settings import Settings

STARTUP_TIMEOUT_S = 180.0  # a framework agent (pydantic-ai, langgraph) imports for many seconds on a busy machine
LANGGRAPH_CONFIG = "langgraph.json"  # read from the folder `runq dev` starts in, as `langgraph dev` does
API_STOP_S = 15.0  # uvicorn closes open SSE streams at shutdown
STOP_MARGIN_S = 5.0  # beyond the worker's grace, for releasing leases and exiting


def run_dev(settings: Settings, *, host: str, port: int, concurrency: int) -> int:
    """Run everything in the foreground until interrupted; the exit status of the session."""
    if not _port_free(host, port):
        print(
            f"runq dev: port {port} on {host} is in use; pick another with `make run PORT=8080`"
            " (or `runq dev --port 8080`)",
            file=sys.stderr,
        )
        return 1
    stop = _StopSignal()
    if settings.langgraph_config is None and Path(LANGGRAPH_CONFIG).is_file():
        # A LangGraph app's folder: its graphs served as `langgraph dev` would (DESIGN §17).
        settings = settings.model_copy(update={"langgraph_config": Path(LANGGRAPH_CONFIG).resolve()})
    with open_database(settings, create=True, command="runq dev") as db:
        if db.served_by is not None:
            owner = db.served_by
            where = f", API at {owner.api}" if owner.api else ""
            print(
                f"runq dev: the database in {db.data_dir} is already served by pid {owner.pid}"
                f" (`{owner.command}`{where}); use that one, or stop it first",
                file=sys.stderr,
            )
            return 1
        upgrade(db.url)
        folder = db.data_dir or data_dir(settings)
        key, reused = asyncio.run(dev_key(db.url, folder))
        with _model(settings) as model:
            if model:
                use_dev_model(settings, model)
            start_agents(settings)  # one that cannot be imported: refuse, rather than fail every run
            env = os.environ | {"RUNQ_DATABASE_URL": db.url, "RUNQ_SECRET_KEY": settings.secret_key or ""}
            if settings.langgraph_config is not None:
                env["RUNQ_LANGGRAPH_CONFIG"] = str(settings.langgraph_config)
            env |= dev_model_env(model, settings) if model else {}
            banner = Banner(key, reused, folder / DEV_KEY_FILE, db, model, settings)
            return _serve(settings, env, banner, host=host, port=port, concurrency=concurrency, stop=stop)


@contextmanager
def _model(settings: Settings) -> Iterator[str | None]:
    """The development model's base URL while it serves, or None when a model is configured."""
    if model_configured(settings):
        yield None
        return
    with ModelServer() as server:
        yield server.base_url


def _serve(
    settings: Settings, env: Mapping[str, str], banner: Banner, *, host: str, port: int, concurrency: int, stop: _StopSignal
) -> int:
    """Start the API and the worker, print the banner once they are up, supervise, stop them."""
    children = {
        "api": subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "app.main:app", "--host", host, "--port", str(port)], env=env
        ),
        "worker": subprocess.Popen([sys.executable, "-m", "app.worker", "--concurrency", str(concurrency)], env=env),
    }
    try:
        base = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
        if not _wait_healthy(base, children, stop):
            return 0 if stop.requested else 1
        banner.db.advertise(api=base, model=banner.model)
        print(banner.text(base), flush=True)
        return _supervise(children, banner.db, stop)
    finally:
        grace = settings.shutdown_grace_s
        print(
            f"runq dev: stopping; the worker has up to {grace:g} s (RUNQ_SHUTDOWN_GRACE_S) to"
            " finish its runs before it releases their leases (Ctrl-C again kills it now)",
            file=sys.stderr,
            flush=True,
        )
        _stop_all(children, stop, {"api": API_STOP_S, "worker": grace + STOP_MARGIN_S})


def _supervise(children: Mapping[str, subprocess.Popen[bytes]], db: Database, stop: _StopSignal) -> int:
    while not stop.requested:
        for name, child in children.items():
            if child.poll() is not None:
                print(f"runq dev: the {name} exited with {child.returncode}", file=sys.stderr)
                return 1
        if not db.alive:
            print(f"runq dev: the embedded PostgreSQL exited; see {db.data_dir}/pgdata.log", file=sys.stderr)
            return 1
        time.sleep(0.2)
    return 0


def _port_free(host: str, port: int) -> bool:
    """Whether the API could listen there now (uvicorn sets SO_REUSEADDR too)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


class _StopSignal:
    """Turns SIGINT/SIGTERM into a flag the supervising loop checks."""

    def __init__(self) -> None:
        self.count = 0
        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)

    @property
    def requested(self) -> bool:
        return self.count > 0

    @property
    def forced(self) -> bool:
        """A second signal: the user will not wait for the grace period."""
        return self.count > 1

    def _handle(self, _signum: int, _frame: FrameType | None) -> None:
        self.count += 1


def _wait_healthy(base: str, children: dict[str, subprocess.Popen[bytes]], stop: _StopSignal) -> bool:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline and not stop.requested:
        if any(child.poll() is not None for child in children.values()):
            print("runq dev: a child process exited during startup", file=sys.stderr)
            return False
        try:
            if httpx.get(f"{base}/readyz", timeout=1.0).status_code == 200:
                return True
        except httpx.TransportError:
            pass  # not listening yet
        time.sleep(0.2)
    if not stop.requested:
        print(f"runq dev: the API did not become ready at {base}", file=sys.stderr)
    return False


def _stop_all(
    children: Mapping[str, subprocess.Popen[bytes]], stop: _StopSignal, timeouts: Mapping[str, float]
) -> None:
    """SIGTERM each child, then SIGKILL the ones still running after their own timeout."""
    for child in children.values():
        if child.poll() is None:
            child.terminate()
    started = time.monotonic()
    while any(child.poll() is None for child in children.values()):
        for name, child in children.items():
            if child.poll() is None and (stop.forced or time.monotonic() - started > timeouts[name]):
                print(f"runq dev: killing the {name}", file=sys.stderr)
                child.kill()
                child.wait()
        time.sleep(0.1)
