"""When ``runq dev`` runs the development model, and how its processes are pointed at it."""

from __future__ import annotations

from app.settings import Settings

DEV_API_KEY = "runq-dev"  # the development model checks no key; SDKs want one all the same
DEV_MODEL_NAME = "runq-dev"
MODEL_SETTINGS = ("openai_base_url", "openai_api_key")


def model_configured(settings: Settings) -> bool:
    """Whether the user named a model endpoint or a key (``RUNQ_OPENAI_BASE_URL`` or
    ``RUNQ_OPENAI_API_KEY``): then runq uses theirs and starts no development model."""
    return any(name in settings.model_fields_set for name in MODEL_SETTINGS)


def dev_model_env(base_url: str, settings: Settings) -> dict[str, str]:
    """The ``RUNQ_OPENAI_*`` variables that point the API and the workers at the development
    model (a model name the user set is kept: the development model answers to any)."""
    model = settings.openai_model if "openai_model" in settings.model_fields_set else DEV_MODEL_NAME
    return {"RUNQ_OPENAI_BASE_URL": base_url, "RUNQ_OPENAI_API_KEY": DEV_API_KEY, "RUNQ_OPENAI_MODEL": model}


def use_dev_model(settings: Settings, base_url: str) -> None:
    """Point this process's settings at a running development model (a worker started in a
    second terminal beside ``runq dev``, when the user configured no model)."""
    settings.openai_base_url = base_url
    settings.openai_api_key = DEV_API_KEY
    if "openai_model" not in settings.model_fields_set:
        settings.openai_model = DEV_MODEL_NAME


def adopt_advertised_model(settings: Settings) -> None:
    """A command started beside ``runq dev`` (an extra worker, a second API) with no model of
    its own uses the development model that ``runq dev`` runs, as its own worker does."""
    from app.db.runtime import advertised_model  # the data folder; not needed by the API's import

    if not model_configured(settings) and (base_url := advertised_model(settings)):
        use_dev_model(settings, base_url)
