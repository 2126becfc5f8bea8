"""One set of model settings for every agent: ``RUNQ_OPENAI_*``.

The built-in ``openai`` agent and PydanticAI agents without a model of their own read
``RUNQ_OPENAI_BASE_URL`` / ``RUNQ_OPENAI_API_KEY`` / ``RUNQ_OPENAI_MODEL`` from runq's settings.
Code that builds its own OpenAI client at import (LangGraph's ``ChatOpenAI``, the OpenAI Agents
SDK) reads the SDK's variables instead, so runq sets ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``
from its own before it imports the agents, unless the user set them: a team's graph runs
unchanged against whatever model runq is pointed at (the development model of ``runq dev``
included).
"""

from __future__ import annotations

import os

from app.settings import Settings


def share_model_settings(settings: Settings) -> None:
    """Fill ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` in this process from ``RUNQ_OPENAI_*``."""
    os.environ.setdefault("OPENAI_BASE_URL", settings.openai_base_url)
    if settings.openai_api_key:
        os.environ.setdefault("OPENAI_API_KEY", settings.openai_api_key)
