"""Configuration from ``RUNQ_*`` environment variables."""

from __future__ import annotations

import secrets
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, PositiveFloat, PrivateAttr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

Seconds = PositiveFloat

BUILTIN_AGENTS = {
    "demo": "app.agents.demo:DemoAgent",
    "openai": "app.agents.openai:OpenAIAgent",
}


SECRET_KEY_FILE = "secret_key"  # the development key kept in the data folder


class Settings(BaseSettings):
    """Every knob of runq; fractional seconds are accepted everywhere."""

    model_config = SettingsConfigDict(env_prefix="RUNQ_", extra="ignore")
    # RUNQ_SECRET_KEY was unset and no key was kept yet: this process made one up.
    _secret_key_generated: bool = PrivateAttr(default=False)

    env: Literal["development", "production"] = "development"
    database_url: str | None = Field(
        default=None,
        description="PostgreSQL URL, perhaps with several hosts (h1:5432,h2:5432: only a primary is"
        " kept); unset uses the embedded server of the data folder",
    )
    data_dir: str | None = Field(
        default=None, description="The embedded server's data folder; unset: .runq/ at the project root"
    )
    listen_database_url: str | None = Field(
        default=None,
        description="Direct session connection for LISTEN and `runq migrate`, when RUNQ_DATABASE_URL"
        " is a transaction-mode pooler; defaults to RUNQ_DATABASE_URL",
    )

    db_prepared_statements: bool = Field(
        default=True,
        description="false behind a transaction-mode pooler (PgBouncer): no server-side prepared"
        " statement outlives its transaction or shares a name; LISTEN must then go direct"
        " (RUNQ_LISTEN_DATABASE_URL)",
    )
    db_pool_size: Annotated[int | None, Field(ge=1)] = Field(
        default=None,
        description="Database connections a process may hold besides its LISTEN and heartbeat"
        " sessions; unset: 10 (2 for a CLI command)",
    )
    db_max_overflow: Annotated[int, Field(ge=0)] = Field(
        default=0, description="Extra connections opened past RUNQ_DB_POOL_SIZE under load, closed once idle"
    )
    db_pool_timeout_s: Seconds = Field(
        default=60.0, description="How long work waits for a free pooled connection before it fails"
    )
    openai_max_connections: Annotated[int | None, Field(ge=1)] = Field(
        default=None,
        description="Concurrent model HTTP connections per worker process; unset: no cap of its own"
        " (a run streams one turn at a time, so at most one per run slot)",
    )

    lease_s: Seconds = 30.0
    heartbeat_s: Seconds = 10.0
    poll_s: Seconds = 1.0
    reaper_s: Seconds = 5.0
    retry_base_s: Seconds = 5.0
    retry_max_s: Seconds = 300.0
    max_attempts: Annotated[int, Field(ge=1)] = 3
    tenant_max_inflight: Annotated[int, Field(ge=0)] = 0
    tenant_create_per_s: Annotated[float, Field(ge=0)] = Field(
        default=0.0, description="Runs a tenant may create per second, cluster-wide (0 = no limit)"
    )
    tenant_create_burst: Annotated[int | None, Field(ge=1)] = Field(
        default=None, description="Creates a tenant may make at once; unset: twice RUNQ_TENANT_CREATE_PER_S"
    )
    tenant_max_pending: Annotated[int, Field(ge=0)] = Field(
        default=0, description="Runs pending or waiting a tenant may have (0 = no limit)"
    )
    tenant_max_streams: Annotated[int, Field(ge=0)] = Field(
        default=0, description="Event streams a tenant may hold open, cluster-wide (0 = no limit)"
    )
    tenant_max_schedules: Annotated[int, Field(ge=0)] = Field(
        default=100, description="Schedules a tenant may have (0 = no limit)"
    )
    shutdown_grace_s: Annotated[float, Field(ge=0)] = 30.0
    max_body_bytes: Annotated[int, Field(ge=1024)] = 262_144
    chat_max_body_bytes: Annotated[int, Field(ge=1024)] = Field(
        default=16_777_216,
        description="POST /ai-sdk/chat bodies (a client that resends the whole history) are read up to this"
        " many bytes, one message at a time; each message at most RUNQ_MAX_BODY_BYTES",
    )
    max_data_bytes: Annotated[int, Field(ge=1024)] = Field(
        default=8 * 1024 * 1024,
        description="The largest value a run may store (an event's data, an output, a checkpoint, ...)"
        " once encoded as JSON; a run storing a larger one ends dead with invalid_data",
    )
    stream_token_ttl_s: Seconds = 300.0
    thread_token_ttl_s: Annotated[float, Field(gt=0, le=86400)] = 3600.0
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Origins a browser may call the API from (CORS); empty: none"
    )
    secret_key: str | None = None
    priority_aging_s: Seconds = 60.0
    presence_ttl_s: Seconds = 15.0
    retention_days: Annotated[float, Field(ge=0)] = 30.0
    redact_roots: Annotated[list[str], NoDecode] = Field(default_factory=list)

    webhook_retry_for_s: Seconds = 86400.0
    webhook_timeout_s: Seconds = 10.0
    webhook_allow_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Hosts or CIDRs webhooks may reach although private or loopback (development, tests)",
    )
    webhook_hosts_only: bool = Field(
        default=False, description="Deliver only to RUNQ_WEBHOOK_ALLOW_HOSTS; resolve and contact nothing else"
    )

    agents: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    worker_metrics_port: int | None = None
    log_format: Literal["auto", "json", "text"] = "auto"
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    openai_base_url: str = "https://api.openai.com/v1"
    openai_api_key: str | None = None
    openai_model: str = "gpt-4o-mini"
    # The agent a chat frontend's message runs when its body names none (POST /ai-sdk/chat).
    chat_agent: str = Field(default="openai", min_length=1)

    # LangGraph graphs (app/agents/langgraph/): checkpoints kept per LangGraph thread and
    # namespace, the newest first; older ones are deleted as new ones are stored.
    langgraph_keep_checkpoints: int = Field(default=20, ge=1)
    # A `langgraph.json` whose graphs are agents named by their graph ids, served under
    # /langgraph (DESIGN §17); `runq dev` reads ./langgraph.json when present.
    langgraph_config: Path | None = None
    # OpenAI Agents SDK agents (app/agents/openai_agents/): their spans go to runq's
    # OpenTelemetry traces; the SDK's own export to OpenAI only when this asks for it too.
    openai_agents_trace_export: bool = False

    @field_validator("agents", mode="before")
    @classmethod
    def _parse_agents(cls, value: object) -> object:
        """``RUNQ_AGENTS=name=module:Class,other=module:Class`` adds to the built-in agents."""
        if isinstance(value, str):
            pairs = (item.split("=", 1) for item in value.split(",") if item.strip())
            return {name.strip(): target.strip() for name, target in pairs}
        return value

    @field_validator("redact_roots", mode="before")
    @classmethod
    def _parse_roots(cls, value: object) -> object:
        if isinstance(value, str):
            return [root for root in value.split(":") if root]
        return value

    @field_validator("webhook_allow_hosts", "cors_origins", mode="before")
    @classmethod
    def _parse_hosts(cls, value: object) -> object:
        if isinstance(value, str):
            return [host.strip() for host in value.split(",") if host.strip()]
        return value

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if self.heartbeat_s >= self.lease_s:
            raise ValueError("RUNQ_HEARTBEAT_S must be shorter than RUNQ_LEASE_S")
        if self.retry_base_s > self.retry_max_s:
            raise ValueError("RUNQ_RETRY_BASE_S must not exceed RUNQ_RETRY_MAX_S")
        if self.env == "production":
            # Refuse the conveniences that are unsafe once real tenants depend on us.
            if not self.database_url:
                raise ValueError("RUNQ_DATABASE_URL is required when RUNQ_ENV=production")
            if not self.secret_key or len(self.secret_key) < 32:
                raise ValueError("RUNQ_SECRET_KEY (32+ chars) is required when RUNQ_ENV=production")
        if self.secret_key is None:
            # Development only. With the embedded database the key is kept next to its data
            # (app.db.runtime.keep_secret_key), so webhook secrets sealed with it (app/signing.py)
            # still open after a restart and in CLI commands; otherwise tokens die with the
            # process, fine for one dev API.
            self.secret_key = secrets.token_urlsafe(32)
            self._secret_key_generated = True
        return self

    @property
    def agent_registry(self) -> dict[str, str]:
        if self.langgraph_config is None:
            return {**BUILTIN_AGENTS, **self.agents}
        from app.agents.langgraph_config import graph_agents  # reads only JSON: no LangGraph import

        return {**BUILTIN_AGENTS, **graph_agents(self.langgraph_config), **self.agents}


@lru_cache
def get_settings() -> Settings:
    return Settings()
