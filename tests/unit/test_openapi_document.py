"""The OpenAPI document, checked in: a change to the API's shape, down to the order of a model's
properties, shows as a diff of the document.

After an intended change: ``RUNQ_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/unit/test_openapi_document.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from app.main import create_app
from app.settings import Settings

GOLDEN = Path(__file__).parent.parent / "golden" / "openapi.json"


def render() -> str:
    """The document as ``/openapi.json`` serves it, with the built-in agents only (RUNQ_AGENTS
    would add names), as text: comparing dicts would not see properties change order."""
    document = create_app(Settings(agents={})).openapi()
    return json.dumps(document, indent=1, ensure_ascii=False) + "\n"


def test_the_document_matches_the_golden_file() -> None:
    rendered = render()
    if os.environ.get("RUNQ_UPDATE_GOLDEN"):
        GOLDEN.write_text(rendered, encoding="utf-8")
    assert rendered == GOLDEN.read_text(encoding="utf-8"), (
        "the OpenAPI document changed: review the diff and rerun with RUNQ_UPDATE_GOLDEN=1"
    )
