"""The shell tool: exit codes, merged and capped output, redaction, deadline and kill."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from app.guards.redact import Redactor
from app.tools.shell import ProcessGroups, run_shell


def alive(pid: int) -> bool:
    """Running and not a zombie (a killed orphan may wait a moment for its reaper)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


async def wait_dead(pid: int, within: float = 5.0) -> bool:
    for _ in range(int(within / 0.02)):
        if not alive(pid):
            return True
        await asyncio.sleep(0.02)
    return False


async def test_exit_code_and_merged_output() -> None:
    result = await run_shell("echo one; echo two >&2; exit 7", groups=ProcessGroups())
    assert (result.exit_code, result.output, result.timed_out) == (7, "one\ntwo\n", False)


async def test_output_is_capped_and_redacted() -> None:
    result = await run_shell(
        "echo password=hunter2; head -c 100000 /dev/zero | tr '\\0' x",
        groups=ProcessGroups(),
        max_output_bytes=1000,
        redactor=Redactor(),
    )
    assert result.output.startswith("password=[REDACTED]\nxxx")
    assert result.output.endswith("[output truncated]")
    assert len(result.output) < 1100


async def test_deadline_kills_the_whole_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    result = await run_shell(
        f"sleep 300 & echo $! > {pidfile}; wait", groups=ProcessGroups(), timeout_s=0.3
    )
    assert result.timed_out and result.exit_code is None
    assert await wait_dead(int(pidfile.read_text()))


async def test_background_children_do_not_outlive_the_command(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    result = await run_shell(
        f"sleep 300 & echo $! > {pidfile}; echo started", groups=ProcessGroups()
    )
    assert result.exit_code == 0 and result.output == "started\n"
    assert await wait_dead(int(pidfile.read_text()))


async def test_cancel_kills_the_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    task = asyncio.create_task(
        run_shell(f"echo $$ > {pidfile}; exec sleep 300", groups=ProcessGroups())
    )
    for _ in range(250):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        await asyncio.sleep(0.02)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    assert await wait_dead(int(pidfile.read_text()))


async def test_kill_all_from_another_thread_and_later_commands(tmp_path: Path) -> None:
    groups = ProcessGroups()
    pidfile = tmp_path / "child.pid"
    task = asyncio.create_task(run_shell(f"echo $$ > {pidfile}; exec sleep 300", groups=groups))
    for _ in range(250):
        if pidfile.exists() and pidfile.read_text().strip():
            break
        await asyncio.sleep(0.02)
    await asyncio.to_thread(groups.kill_all)
    result = await task
    assert result.exit_code == -9
    # The registry is closed: a command started afterwards is killed as it registers.
    late = await run_shell("sleep 300", groups=groups, timeout_s=30)
    assert late.exit_code == -9
    assert os.getpgid(os.getpid()) != int(pidfile.read_text())
