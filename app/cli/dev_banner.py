"""What ``runq dev`` prints once it serves: where, the dev key, the model, what to type next."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from app.db.runtime import Database
from app.guards.redact import redact
from app.settings import Settings


def runq_command() -> str:
    """How to call this ``runq`` from the current folder, e.g. ``.venv/bin/runq``."""
    executable = Path(sys.executable).parent / "runq"
    relative = os.path.relpath(executable)
    return str(executable) if relative.startswith("..") else relative


@dataclass(frozen=True)
class Banner:
    key: str
    reused: bool  # the key kept from an earlier start
    key_file: Path
    db: Database
    model: str | None  # the development model's base URL; None: the user's model
    settings: Settings

    def text(self, base: str) -> str:
        runq = runq_command()
        activate = Path(runq).parent / "activate"
        kept = "kept from the last start" if self.reused else "new"
        return f"""
runq dev is up: API {base} (docs at {base}/docs, UI at {base}/ui), one worker.
Database: {redact(self.db.url)}{f" (data in {self.db.data_dir})" if self.db.data_dir else ""}
Dev key: an admin key of tenant `dev`, {kept} ({self.key_file}, mode 0600)
{self._model_lines()}
  export RUNQ_KEY={self.key}
  export RUNQ_URL={base}

  # create a demo run
  curl -s {base}/runs -H "Authorization: Bearer $RUNQ_KEY" -H 'Content-Type: application/json' \\
       -d '{{"agent": "demo", "input": {{"prompt": "hello", "steps": 5, "step_s": 1}}}}'

  # follow it (resume after a drop with -H 'Last-Event-ID: <last id seen>')
  curl -N {base}/runs/<id>/events -H "Authorization: Bearer $RUNQ_KEY"
  # or let runq follow it, resuming by itself after a drop (uses RUNQ_URL and RUNQ_KEY)
  {runq} runs follow <id>

  # stop it
  curl -s -X POST {base}/runs/<id>/cancel -H "Authorization: Bearer $RUNQ_KEY"

In a second terminal (these use this database; or first: source {activate}):
  {runq} runs list
  {runq} worker --concurrency 8
  {runq} keys create --tenant acme

Ctrl-C stops everything.
"""

    def _model_lines(self) -> str:
        if self.model is None:
            return f"Model: {self.settings.openai_model} at {redact(self.settings.openai_base_url)} (RUNQ_OPENAI_*)\n"
        return (
            f"Model: runq's development model at {self.model} (deterministic, no key needed; what it\n"
            "  answers: docs/dev-model.md). For a real one, start with RUNQ_OPENAI_BASE_URL and\n"
            "  RUNQ_OPENAI_API_KEY set, e.g. RUNQ_OPENAI_BASE_URL=https://api.openai.com/v1\n"
            "  RUNQ_OPENAI_API_KEY=sk-... RUNQ_OPENAI_MODEL=gpt-4o-mini make run\n"
        )
