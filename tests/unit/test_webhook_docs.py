"""The verification snippets of docs/webhooks.md, run as written against runq's signatures (the
JavaScript one with Node, when the machine has it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from app.guards.signing import new_secret, signature_headers

DOC = (Path(__file__).resolve().parents[2] / "docs" / "webhooks.md").read_text(encoding="utf-8")
BODY = '{"type":"run.completed","run":{"output":{"text":"grüße"}}}'


def _block(language: str, containing: str) -> str:
    return next(b for b in re.findall(rf"```{language}\n(.*?)```", DOC, re.S) if containing in b)


def _signed() -> tuple[str, dict[str, str]]:
    current, old = new_secret(), new_secret()
    return current, signature_headers(secrets_=[current, old], msg_id="7a1f0c3e", body=BODY)


def test_the_python_snippet_verifies() -> None:
    namespace: dict[str, Any] = {}
    exec(_block("python", "def verified"), namespace)
    secret, headers = _signed()
    assert namespace["verified"](secret, headers, BODY.encode())
    assert not namespace["verified"](new_secret(), headers, BODY.encode())


@pytest.mark.skipif(shutil.which("node") is None, reason="no Node on this machine")
def test_the_javascript_snippet_verifies(tmp_path: Path) -> None:
    script = tmp_path / "verify.mjs"
    script.write_text(
        _block("js", "export function verified")
        + "\nconst [s, id, ts, sig, body] = process.argv.slice(2);\n"
        + 'console.log(verified(s, {"webhook-id": id, "webhook-timestamp": ts, "webhook-signature": sig}, body));\n',
        encoding="utf-8",
    )
    secret, headers = _signed()
    for key, expected in ((secret, "true"), (new_secret(), "false")):
        args = [key, headers["webhook-id"], headers["webhook-timestamp"], headers["webhook-signature"], BODY]
        out = subprocess.run(["node", str(script), *args], capture_output=True, text=True, timeout=30, check=True)
        assert out.stdout.strip() == expected
