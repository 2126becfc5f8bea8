"""Generate ``runq_client/_sync.py`` from ``runq_client/_async.py`` (``--check``: fail if stale).

The blocking client is the async one with the ``async``/``await`` taken out, so it is written
once; a test runs ``--check`` so the committed file never drifts from its source.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "runq_client"
SUBSTITUTIONS = [
    (r'^"""The asyncio client: :class:`AsyncClient` moves the bytes of the shared calls over httpx\.\n',
     '"""The blocking client: :class:`Client` moves the bytes of the shared calls over httpx.\n'),
    (r"The blocking\nclient, :mod:`runq_client._sync`, is generated from this file by ``scripts/unasync.py``\n",
     "This file is\ngenerated from :mod:`runq_client._async` by ``scripts/unasync.py``: edit that one\n"),
    (r"^import asyncio$", "import time"),
    (r"  # noqa: ASYNC109 .*$", ""),
    (r"for event in (.*):\n\s*yield event$", r"yield from \1"),
    (r"\basync def __aenter__\b", "def __enter__"),
    (r"\basync def __aexit__\b", "def __exit__"),
    (r"\baclose\b", "close"),
    (r"\basync (def|with|for) ", r"\1 "),
    (r"\bawait ", ""),
    (r"\baread\(\)", "read()"),
    (r"\baiter_bytes\b", "iter_bytes"),
    (r"\basyncio\.sleep\b", "time.sleep"),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\bAsyncClient\b", "Client"),
]


def unasync(source: str) -> str:
    for pattern, replacement in SUBSTITUTIONS:
        source = re.sub(pattern, replacement, source, flags=re.MULTILINE)
    return source


def main(argv: list[str]) -> int:
    generated = unasync((PACKAGE / "_async.py").read_text())
    target = PACKAGE / "_sync.py"
    if "--check" in argv:
        if target.read_text() != generated:
            print(f"{target} is stale: run python {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    target.write_text(generated)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
