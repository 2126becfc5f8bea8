"""A client generated from ``/openapi.json`` by a maintained generator (openapi-python-client)
creates, reads and cancels a run: the document is exact enough for generated code to work."""

from __future__ import annotations

import asyncio
import importlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.api.keys import create_key
from tests.api_support import ApiProcess

CONFIG = "project_name_override: runq-generated\npackage_name_override: runq_generated\n"


@pytest.fixture(scope="module")
def api(database_url: str) -> Iterator[ApiProcess]:
    process = ApiProcess(database_url)
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def generated(api: ApiProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    root = tmp_path_factory.mktemp("generated")
    (root / "openapi.json").write_bytes(httpx.get(f"{api.base_url}/openapi.json").content)
    (root / "config.yaml").write_text(CONFIG)
    generator = shutil.which("openapi-python-client", path=str(Path(sys.executable).parent))
    assert generator, "openapi-python-client is in the dev extras"
    result = subprocess.run(
        [generator, "generate", "--path", "openapi.json", "--config", "config.yaml", "--meta", "none",
         "--output-path", "runq_generated"],
        cwd=root, capture_output=True, text=True, timeout=120,
        env=os.environ | {"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("runq_generated")
    finally:
        sys.path.remove(str(root))


def test_generated_client_creates_gets_and_cancels_a_run(api: ApiProcess, database_url: str, generated: Any) -> None:
    from runq_generated.api.runs import cancel_run_runs_run_id_cancel_post as cancel
    from runq_generated.api.runs import create_run_runs_post as create
    from runq_generated.api.runs import get_run_runs_run_id_get as get
    from runq_generated.models import (
        CancelRun,
        CreateRun,
        CreateRunAgent,
        CreateRunInput,
        Problem,
        RunOut,
    )

    key = asyncio.run(create_key(database_url, tenant_id="generated"))
    client = generated.AuthenticatedClient(base_url=api.base_url, token=key)
    body = CreateRun(agent=CreateRunAgent.DEMO, input_=CreateRunInput.from_dict({"prompt": "hi"}), delay_s=3600)
    created = create.sync_detailed(client=client, body=body, idempotency_key="generated-1")
    assert created.status_code == 201 and isinstance(created.parsed, RunOut)
    run_id = created.parsed.id
    again = create.sync_detailed(client=client, body=body, idempotency_key="generated-1")
    assert again.status_code == 200 and again.parsed.id == run_id  # the same run, not a second

    fetched = get.sync(run_id, client=client)
    assert isinstance(fetched, RunOut) and fetched.status == "pending" and fetched.input_.to_dict() == {"prompt": "hi"}
    cancelled = cancel.sync(run_id, client=client, body=CancelRun(note="generated"))
    assert isinstance(cancelled, RunOut) and cancelled.status == "cancelled" and cancelled.cancel_reason == "user"
    finished = cancel.sync_detailed(run_id, client=client, body=CancelRun())
    assert finished.status_code == 409 and isinstance(finished.parsed, Problem) and finished.parsed.code == "run_finished"
