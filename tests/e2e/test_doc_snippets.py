"""Every shell block the docs mark runnable (an ``<!-- runnable -->`` line before the fence) runs as
written after ``make run``: each page's blocks in order, in one bash with ``set -euo pipefail``,
from the project root, against a live ``runq dev`` and with the two variables it prints
(``RUNQ_URL``, ``RUNQ_KEY``) exported, as a reader in the second terminal has them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api_support import ROOT, free_port
from tests.e2e.test_dev_session import FAST, _stop, _wait

RUNQ = str(Path(sys.executable).parent / "runq")
BLOCK = re.compile(r"^<!-- runnable -->\n```(?:sh|bash)\n(.*?)^```", re.S | re.M)
PAGES = sorted(p.relative_to(ROOT) for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")] if BLOCK.search(p.read_text()))


def runnable(page: Path) -> str:
    return "\n".join(BLOCK.findall((ROOT / page).read_text()))


@pytest.fixture(scope="module")
def dev() -> Iterator[dict[str, str]]:
    """``runq dev`` on a data folder of its own; the environment its banner tells a reader to set."""
    data = Path(tempfile.mkdtemp(prefix="runq-docs-", dir="/tmp"))
    data.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("RUNQ_DATABASE_URL", "RUNQ_URL", "RUNQ_KEY")}
    env |= FAST | {"RUNQ_DATA_DIR": str(data)}
    port = free_port()
    out = data / "dev.out"
    with open(out, "w") as stdout:
        proc = subprocess.Popen([RUNQ, "dev", "--port", str(port)], cwd=ROOT, env=env, stdout=stdout, stderr=subprocess.STDOUT)
    try:
        banner = _wait(lambda: "Ctrl-C stops everything" in out.read_text() and out.read_text(), 90, "runq dev up")
        exported = dict(re.findall(r"export (RUNQ_KEY|RUNQ_URL)=(\S+)", banner))
        assert set(exported) == {"RUNQ_KEY", "RUNQ_URL"}, banner
        yield env | exported
    finally:
        _stop(proc, timeout=60)


def test_pages_mark_their_walkthroughs_runnable() -> None:
    assert {"README.md", "docs/api.md", "docs/threads.md"} <= {str(p) for p in PAGES}


@pytest.mark.parametrize("page", PAGES, ids=str)
def test_runnable_blocks_run_as_written(dev: dict[str, str], page: Path) -> None:
    script = runnable(page)
    done = subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{script}"], cwd=ROOT, env=dev, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, f"{page} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert not re.search(r'"status":\s*5\d\d', done.stdout), done.stdout
    assert "null" not in re.findall(r"^\S+$", done.stdout, re.M), f"an id came back null:\n{done.stdout}"
