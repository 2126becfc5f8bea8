"""The API app on the test database, with httpx through ASGI and keys for two tenants."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncEngine

from app.main import create_app
from app.settings import Settings
from tests.api_support import SECRET, new_key


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, secret_key=SECRET, poll_s=0.2)


@pytest.fixture
async def app(settings: Settings) -> AsyncIterator[FastAPI]:
    app = create_app(settings, sse_ping_s=0.2)
    async with app.router.lifespan_context(app):
        yield app


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://runq.test") as client:
        yield client


@pytest.fixture
async def alice(engine: AsyncEngine) -> dict[str, str]:
    return await new_key(engine, "alice")


@pytest.fixture
async def bob(engine: AsyncEngine) -> dict[str, str]:
    return await new_key(engine, "bob")

