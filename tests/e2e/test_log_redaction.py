"""The API's log, access log included, never carries a credential.

uvicorn's access log writes the whole request line, and a browser's stream URL carries its
token (`GET /runs/{id}/events?token=…`): anyone reading the logs could follow the run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.api_support import SECRET, free_port, parse_sse

RUNQ = str(Path(sys.executable).parent / "runq")


def _wait_ready(client: httpx.Client, api: subprocess.Popen[bytes], within: float = 30) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        assert api.poll() is None, f"runq api exited with {api.returncode}"
        try:
            if client.get("/readyz").status_code == 200:
                return
        except httpx.TransportError:
            pass  # not listening yet
        time.sleep(0.1)
    raise AssertionError(f"runq api not ready within {within} s")


def test_the_log_of_a_streamed_run_holds_no_token_and_no_key(database_url: str, tmp_path: Path) -> None:
    env = os.environ | {"RUNQ_DATABASE_URL": database_url, "RUNQ_SECRET_KEY": SECRET, "RUNQ_LOG_FORMAT": "json"}
    key = subprocess.run(
        [RUNQ, "keys", "create", "--tenant", "logs"], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    port = free_port()
    log = tmp_path / "api.log"
    with open(log, "w") as stderr:
        api = subprocess.Popen([RUNQ, "api", "--port", str(port)], env=env, stderr=stderr)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            _wait_ready(client, api)
            headers = {"Authorization": f"Bearer {key}"}
            run = client.post("/runs", headers=headers, json={"agent": "demo", "input": {}}).json()
            cancelled = client.post(f"/runs/{run['id']}/cancel", headers=headers)  # no worker: ends now
            assert cancelled.status_code == 202
            token = client.post(f"/runs/{run['id']}/stream-token", headers=headers).json()["token"]
            stream = client.get(f"/runs/{run['id']}/events", params={"token": token})
            assert parse_sse(stream.text)[-1].event == "run.cancelled"
            client.get("/runs", headers={"Authorization": f"Bearer {key}x"})  # a refused key is logged too
    finally:
        api.terminate()
        api.wait(timeout=30)
    text = log.read_text()
    assert f"/runs/{run['id']}/events?token=[REDACTED]" in text  # the access log is on, and redacted
    assert token not in text and token.split(".")[1] not in text
    assert key not in text and key[3:] not in text
