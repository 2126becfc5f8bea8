"""LangGraph's server API under ``/langgraph`` (DESIGN §17, docs/langgraph-server.md): what
``langgraph_sdk`` and ``@langchain/langgraph-sdk`` call, served from runq's threads, runs and
event log. Each resource is a module with its own ``router``; this package joins them into the
one :data:`router` the app factory mounts, so a new resource (the store, crons) adds one line."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.problems import problems
from app.api.protocols.langgraph import assistants, crons, runs, store, threads

# Every route answers LangGraph's status codes with runq's problem body (DESIGN §17).
router = APIRouter(
    prefix="/langgraph",
    tags=["langgraph"],
    responses=problems(400, 401, 403, 404, 409, 413, 422, 429, 503),
)
for _resource in (assistants, threads, crons, runs, store):  # crons first: /runs/crons is no run
    router.include_router(_resource.router)
