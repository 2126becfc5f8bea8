"""Request bodies of LangGraph's server API as its SDKs send them (DESIGN §17), named as
LangGraph names them (runq's own ``CreateRun`` and ``CreateThread`` keep theirs). Fields the SDKs
send that runq has no use for are accepted and ignored (``extra="ignore"``), as the reference
does; a field of the wrong type is a 422."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.convertors import Convertor, register_url_convertor

from app.agents.langgraph_wire import ServerRunInput
from app.api.params import uuid_path
from app.api.schemas import FiniteSeconds, Integral, StoredObject, StoredText, StoredValue, Webhook

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
# Path ids, documented as UUIDs; a malformed one is runq's 422 ``invalid_id``. A run's id is
# matched as a UUID already by the router, so ``/threads/{id}/runs/wait`` is never run ``wait``
# (a GET there is a 405, not a bad run id).
RUN_ID = "{run_id:uuid_text}"


class _UuidText(Convertor[str]):
    regex = "[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("uuid_text", _UuidText())

ThreadId = Annotated[str, uuid_path("The thread's id (a UUID)")]
RunId = Annotated[str, uuid_path("The run's id (a UUID)")]
CheckpointId = Annotated[str, uuid_path("A checkpoint's id (a UUID, as LangGraph makes them)")]
WebhookUrl = Annotated[str, Field(min_length=1, max_length=2048)]
# A page's start: bounded, so no offset overflows PostgreSQL's bigint (a 422, never a 500).
Offset = Annotated[int, Field(ge=0, le=1_000_000), Integral]


def runq_webhook(url: str | None) -> Webhook | None:
    """LangGraph's ``webhook`` (a URL told when a run ends) as runq's §10 webhook: signed,
    delivered at least once from the outbox, on the run's ending events."""
    return None if url is None else Webhook(url=url)


class Body(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class ThreadCreate(Body):
    thread_id: Annotated[uuid.UUID, Field(strict=False)] | None = None
    metadata: StoredObject = Field(default_factory=dict)
    if_exists: Literal["raise", "do_nothing"] = "raise"


class ThreadPatch(Body):
    metadata: StoredObject = Field(default_factory=dict)


class ThreadCountRequest(Body):
    metadata: StoredObject = Field(default_factory=dict)
    values: StoredObject | None = None
    status: Literal["idle", "busy", "interrupted", "error"] | None = None


ThreadSortBy = Literal["thread_id", "status", "created_at", "updated_at", "state_updated_at"]
ThreadField = Literal[
    "thread_id",
    "created_at",
    "updated_at",
    "state_updated_at",
    "metadata",
    "config",
    "status",
    "values",
    "interrupts",
]


class ThreadSearchRequest(ThreadCountRequest):
    """``POST /threads/search``: without ``sort_by``, most recently updated first (as the
    reference); ``sort_order`` defaults to ``desc``; ``select`` keeps only the fields named."""

    ids: list[Annotated[uuid.UUID, Field(strict=False)]] | None = Field(
        default=None, max_length=1000
    )
    limit: Annotated[int, Field(ge=1, le=1000), Integral] = 10
    offset: Offset = 0
    sort_by: ThreadSortBy | None = None
    sort_order: Literal["asc", "desc"] | None = None
    select: list[ThreadField] | None = None


class ThreadStateUpdate(Body):
    values: StoredValue = None
    as_node: StoredText | None = None
    checkpoint_id: StoredText | None = None
    checkpoint: StoredObject | None = None


class ThreadHistoryRequest(Body):
    limit: Annotated[int, Field(ge=1, le=1000), Integral] = 10
    before: StoredObject | StoredText | None = None
    metadata: StoredObject | None = None
    checkpoint: StoredObject | None = None


class AssistantPatch(Body):
    """``PATCH /assistants/{id}``: a new version; a field left out keeps the current one's,
    ``metadata`` is merged into it."""

    graph_id: StoredText | None = None
    config: StoredObject | None = None
    context: StoredObject | None = None
    metadata: StoredObject | None = None
    name: StoredText | None = None
    description: StoredText | None = None


class AssistantCreate(AssistantPatch):
    """``POST /assistants``: an assistant of one's own, version 1."""

    graph_id: StoredText
    assistant_id: Annotated[uuid.UUID, Field(strict=False)] | None = None
    if_exists: Literal["raise", "do_nothing"] | None = None


class AssistantVersionsRequest(Body):
    metadata: StoredObject | None = None
    limit: Annotated[int, Field(ge=1, le=1000), Integral] = 10
    offset: Offset = 0


class AssistantLatest(Body):
    version: Annotated[int, Field(ge=1, le=2**31 - 1), Integral]  # PostgreSQL's integer


class AssistantSearchRequest(Body):
    graph_id: StoredText | None = None
    metadata: StoredObject = Field(default_factory=dict)
    name: StoredText | None = None
    limit: Annotated[int, Field(ge=1, le=1000), Integral] = 10
    offset: Offset = 0


class RunCreate(Body):
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
    after_seconds: Annotated[FiniteSeconds, Field(ge=0, le=365 * 86400)] = 0.0
    durability: Literal["sync", "async", "exit"] | None = None
    webhook: WebhookUrl | None = None

    def start_checkpoint(self) -> dict[str, Any] | None:
        """The checkpoint the run starts from (None: the thread's latest)."""
        return None

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
            stream_subgraphs=self.stream_subgraphs,
            interrupt_before=self.interrupt_before,
            interrupt_after=self.interrupt_after,
            assistant_id=self.assistant_id,
            metadata=self.metadata,
            multitask_strategy=self.multitask_strategy,
            durability=self.durability,
            checkpoint=self.start_checkpoint(),
        ).model_dump(mode="json", exclude_none=True)


class CheckpointConfig(Body):
    """A checkpoint of the run's thread to start from, as LangGraph's server takes it; its
    ``thread_id`` (if any) is the thread's own and ``checkpoint_map`` is passed as given."""

    checkpoint_id: Annotated[uuid.UUID, Field(strict=False)] | None = None
    checkpoint_ns: StoredText | None = None
    checkpoint_map: StoredObject | None = None
    thread_id: StoredText | None = None


class ThreadRunCreate(RunCreate):
    """A run on a thread: it may start from one of the thread's checkpoints (``checkpoint_id``,
    or ``checkpoint``, which wins), forking the thread there, instead of its latest."""

    checkpoint_id: Annotated[uuid.UUID, Field(strict=False)] | None = None
    checkpoint: CheckpointConfig | None = None

    def start_checkpoint(self) -> dict[str, Any] | None:
        start: dict[str, Any] = {}
        if self.checkpoint_id is not None:
            start["checkpoint_id"] = str(self.checkpoint_id)
        if self.checkpoint is not None:
            given = self.checkpoint.model_dump(mode="json", exclude_none=True)
            start |= {k: v for k, v in given.items() if k != "thread_id"}
        return start or None


CancelAction = Literal["interrupt", "rollback"]


class RunsCancel(Body):
    """``POST /runs/cancel``: runs by id (of a thread), or by status."""

    thread_id: Annotated[uuid.UUID, Field(strict=False)] | None = None
    run_ids: list[Annotated[uuid.UUID, Field(strict=False)]] | None = Field(
        default=None, max_length=1000
    )
    status: Literal["pending", "running", "all"] | None = None
