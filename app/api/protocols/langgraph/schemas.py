"""Request bodies of LangGraph's server API as its SDKs send them (DESIGN §17). Fields the SDKs
send that runq has no use for are accepted and ignored (``extra="ignore"``), as the reference
does; a field of the wrong type is a 422."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.agents.langgraph_wire import ServerRunInput
from app.api.params import uuid_path
from app.api.schemas import StoredObject, StoredText, StoredValue, Webhook

StreamMode = Literal[
    "values",
    "updates",
    "messages",
    "messages-tuple",
    "custom",
    "events",
    "debug",
    "tasks",
    "checkpoints",
]
Strategy = Literal["reject", "interrupt", "rollback", "enqueue"]
# Path ids, documented as UUIDs; a malformed one is runq's 422 ``invalid_id``.
ThreadId = Annotated[str, uuid_path("The thread's id (a UUID)")]
RunId = Annotated[str, uuid_path("The run's id (a UUID)")]
CheckpointId = Annotated[str, uuid_path("A checkpoint's id (a UUID, as LangGraph makes them)")]
WebhookUrl = Annotated[str, Field(min_length=1, max_length=2048)]


def runq_webhook(url: str | None) -> Webhook | None:
    """LangGraph's ``webhook`` (a URL told when a run ends) as runq's §10 webhook: signed,
    delivered at least once from the outbox, on the run's ending events."""
    return None if url is None else Webhook(url=url)


class Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class CreateThread(Body):
    thread_id: Annotated[uuid.UUID, Field(strict=False)] | None = None
    metadata: StoredObject = Field(default_factory=dict)
    if_exists: Literal["raise", "do_nothing"] = "raise"


class PatchThread(Body):
    metadata: StoredObject = Field(default_factory=dict)


class CountThreads(Body):
    metadata: StoredObject = Field(default_factory=dict)
    values: StoredObject | None = None
    status: Literal["idle", "busy", "interrupted", "error"] | None = None


class SearchThreads(CountThreads):
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)


class UpdateState(Body):
    values: StoredValue = None
    as_node: StoredText | None = None
    checkpoint_id: StoredText | None = None
    checkpoint: StoredObject | None = None


class History(Body):
    limit: int = Field(default=10, ge=1, le=1000)
    before: StoredObject | StoredText | None = None
    metadata: StoredObject | None = None
    checkpoint: StoredObject | None = None


class SearchAssistants(Body):
    graph_id: StoredText | None = None
    metadata: StoredObject = Field(default_factory=dict)
    name: StoredText | None = None
    limit: int = Field(default=10, ge=1, le=1000)
    offset: int = Field(default=0, ge=0)


class CreateRun(Body):
    """A run: on a thread, or stateless (``POST /runs``)."""

    assistant_id: StoredText
    input: StoredValue = None
    command: StoredObject | None = None
    config: StoredObject = Field(default_factory=dict)
    context: StoredObject | None = None
    metadata: StoredObject = Field(default_factory=dict)
    stream_mode: StreamMode | list[StreamMode] = "values"
    stream_subgraphs: bool = False
    stream_resumable: bool = False  # every runq stream resumes; accepted for the SDKs' sake
    interrupt_before: list[StoredText] | Literal["*"] | None = None
    interrupt_after: list[StoredText] | Literal["*"] | None = None
    multitask_strategy: Strategy = "enqueue"
    if_not_exists: Literal["create", "reject"] = "reject"
    on_disconnect: Literal["cancel", "continue"] | None = None
    after_seconds: float = Field(default=0.0, ge=0, le=365 * 86400)
    durability: Literal["sync", "async", "exit"] | None = None
    webhook: WebhookUrl | None = None

    def modes(self) -> list[str]:
        return [self.stream_mode] if isinstance(self.stream_mode, str) else list(self.stream_mode)

    def run_input(self) -> dict[str, Any]:
        """The runq run's input the graph's agent reads (:class:`ServerRunInput`)."""
        return ServerRunInput(
            input=self.input,
            command=self.command,
            config=self.config,
            context=self.context,
            stream_mode=self.modes(),
            interrupt_before=self.interrupt_before,
            interrupt_after=self.interrupt_after,
            assistant_id=self.assistant_id,
            metadata=self.metadata,
            multitask_strategy=self.multitask_strategy,
            durability=self.durability,
        ).model_dump(mode="json", exclude_none=True)
