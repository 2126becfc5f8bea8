"""Every walkthrough the docs mark runnable runs as written after ``make run``, with no model key.

Marks (an HTML comment on the line before a fence):

- ``<!-- runnable -->`` before a ``sh`` block: run in one bash with ``set -euo pipefail`` from the
  project root, with the two variables ``make run`` prints (``RUNQ_URL``, ``RUNQ_KEY``) exported,
  as a reader in the second terminal has them; before a ``python`` block: run by the project's
  Python, with the same variables.
- ``<!-- runnable: file -->`` before a block whose first line is ``# NAME``: the file the reader
  writes next to the README (``myagents.py``).
- ``<!-- runnable: first terminal -->`` before a ``sh`` block that is one ``VAR=… make run …``
  line: a fresh ``runq dev`` with those variables (and no model key: the development model
  answers), in a folder holding the page's files so far; the page's later blocks run against it.

Each page's shell blocks run in order in one bash (a later block uses an earlier one's
variables), its Python blocks after them; blocks before a page's first ``first terminal`` block
share one ``runq dev`` with the other pages.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.api_support import ROOT, free_port
from tests.e2e.test_dev_session import FAST, _stop, _wait

RUNQ = str(Path(sys.executable).parent / "runq")
BLOCK = re.compile(r"^<!-- runnable(?P<kind>: file|: first terminal)? -->\n```(?P<lang>sh|bash|python)\n(?P<body>.*?)^```", re.S | re.M)
PAGES = sorted(p.relative_to(ROOT) for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")] if BLOCK.search(p.read_text()))
# A reader's environment has no model configured and no runq variables of an earlier session.
UNSET = ("RUNQ_DATABASE_URL", "RUNQ_URL", "RUNQ_KEY", "RUNQ_OPENAI_BASE_URL", "RUNQ_OPENAI_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL")


@dataclass
class Segment:
    """The blocks of a page that run against one ``runq dev``."""

    server_env: dict[str, str] | None = None  # None: the shared runq dev
    files: dict[str, str] = field(default_factory=dict)
    scripts: list[tuple[str, str]] = field(default_factory=list)  # (language, text)


def segments(page: Path) -> list[Segment]:
    found = [Segment()]
    files: dict[str, str] = {}
    for match in BLOCK.finditer((ROOT / page).read_text()):
        kind, lang, body = match["kind"], match["lang"], match["body"]
        if kind == ": file":
            name, _, text = body.partition("\n")
            files[name.removeprefix("#").strip()] = text
        elif kind == ": first terminal":
            found.append(Segment(server_env=first_terminal_env(body), files=dict(files)))
        else:
            found[-1].scripts.append((lang, body))
    return [s for s in found if s.scripts]


def first_terminal_env(block: str) -> dict[str, str]:
    """The ``VAR=value`` words before ``make run`` in a one-command block."""
    words = shlex.split(block.replace("\\\n", " "), comments=True)
    assert "make" in words and words[words.index("make") + 1] == "run", block
    return dict(word.split("=", 1) for word in words[: words.index("make")])


def reader_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in UNSET} | FAST


@contextmanager
def runq_dev(extra: dict[str, str], files: dict[str, str]) -> Iterator[dict[str, str]]:
    """``runq dev`` in a folder of its own holding ``files``; the environment its banner tells a
    reader to set."""
    folder = Path(tempfile.mkdtemp(prefix="runq-docs-", dir="/tmp"))
    folder.chmod(0o755)
    for name, text in files.items():
        (folder / name).write_text(text)
    env = reader_env() | {"RUNQ_DATA_DIR": str(folder / ".runq")}
    out = folder / "dev.out"
    with open(out, "w") as stdout:
        proc = subprocess.Popen(
            [RUNQ, "dev", "--port", str(free_port())], cwd=folder, env=env | extra, stdout=stdout, stderr=subprocess.STDOUT
        )
    try:
        # A framework's agent module imports for many seconds in each of runq dev's processes.
        banner = _wait(lambda: proc.poll() is not None or "Ctrl-C stops everything" in out.read_text(), 240, "runq dev up")
        banner = out.read_text()
        assert proc.poll() is None and "runq's development model" in banner, banner
        exported = dict(re.findall(r"export (RUNQ_KEY|RUNQ_URL)=(\S+)", banner))
        assert set(exported) == {"RUNQ_KEY", "RUNQ_URL"}, banner
        yield env | exported
    finally:
        _stop(proc, timeout=60)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def dev() -> Iterator[dict[str, str]]:
    with runq_dev({}, {}) as env:
        yield env


def test_pages_mark_their_walkthroughs_runnable() -> None:
    assert {"README.md", "docs/api.md", "docs/threads.md", "docs/agents.md", "docs/frontends-ag-ui.md"} <= {
        str(p) for p in PAGES
    }
    readme = [kind for s in segments(Path("README.md")) for kind, _ in s.scripts]
    assert "python" in readme  # the Python client's walkthrough


@pytest.mark.timeout(900)  # a page with first-terminal blocks starts a runq dev for each
@pytest.mark.parametrize("page", PAGES, ids=str)
def test_runnable_blocks_run_as_written(dev: dict[str, str], page: Path) -> None:
    for segment in segments(page):
        if segment.server_env is None:
            run_scripts(page, segment, dev)
        else:
            with runq_dev(segment.server_env, segment.files) as env:
                run_scripts(page, segment, env)


def run_scripts(page: Path, segment: Segment, env: dict[str, str]) -> None:
    shell = "\n".join(text for lang, text in segment.scripts if lang != "python")
    if shell:
        check(page, subprocess.run(["bash", "-c", f"set -euo pipefail\n{shell}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240))
    for lang, text in segment.scripts:
        if lang == "python":
            check(page, subprocess.run([sys.executable, "-c", text], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120))


def check(page: Path, done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode == 0, f"{page} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert not re.search(r'"status":\s*5\d\d', done.stdout), done.stdout
    assert "null" not in re.findall(r"^\S+$", done.stdout, re.M), f"an id came back null:\n{done.stdout}"
    assert "model_not_configured" not in done.stdout, done.stdout
