"""RUNQ_DATABASE_URL with several hosts, in libpq's form and in SQLAlchemy's, read the same way
and rendered for each driver layer (DESIGN §20)."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from app.db.url import DatabaseURL, Host, async_url, asyncpg_dsn, parse_url

PAIR = DatabaseURL(
    hosts=(Host("db1", 5432), Host("db2", 5433)),
    database="runq",
    user="runq",
    password="p@ss:w/rd",
    query=(("sslmode", "disable"), ("target_session_attrs", "read-write")),
)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://runq:p%40ss%3Aw%2Frd@db1:5432,db2:5433/runq?sslmode=disable&target_session_attrs=read-write",
        "postgresql://runq:p%40ss%3Aw%2Frd@/runq?host=db1:5432&host=db2:5433&sslmode=disable&target_session_attrs=read-write",
        "postgresql+asyncpg://runq:p%40ss%3Aw%2Frd@/runq?host=db1,db2&port=5432,5433&sslmode=disable",
        "postgres://runq:p%40ss%3Aw%2Frd@db1:5432,db2:5433/runq?sslmode=disable",
    ],
    ids=["libpq", "sqlalchemy", "libpq-host-and-port-lists", "postgres-scheme"],
)
def test_both_forms_read_alike(url: str) -> None:
    assert parse_url(url) == PAIR


def test_several_hosts_keep_only_a_primary_unless_told_otherwise() -> None:
    assert ("target_session_attrs", "read-write") in parse_url("postgresql://u@a,b/db").query
    chosen = parse_url("postgresql://u@a,b/db?target_session_attrs=any")
    assert chosen.query == (("target_session_attrs", "any"),)
    # One host is left as it was: a pooler or a single server decides for itself.
    assert parse_url("postgresql://u@a/db").query == ()


def test_rendered_for_asyncpg_in_libpq_form() -> None:
    assert asyncpg_dsn("postgresql://u@/db?host=a:1&host=b:2") == (
        "postgresql://u@a:1,b:2/db?target_session_attrs=read-write"
    )


def test_rendered_for_sqlalchemy_with_a_port_for_every_host() -> None:
    url = async_url("postgresql://u:pw@a,b:2/db")
    assert url == "postgresql+asyncpg://u:pw@/db?host=a:5432&host=b:2&target_session_attrs=read-write"
    engine = create_async_engine(url)
    _, kwargs = engine.dialect.create_connect_args(make_url(url))
    assert (kwargs["host"], kwargs["port"], kwargs["password"]) == (["a", "b"], [5432, 2], "pw")
    assert kwargs["target_session_attrs"] == "read-write"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres@127.0.0.1:5432/postgres",
        "postgresql://u@db/runq?prepared_statement_cache_size=0",
        "postgresql:///runq",
        "postgresql://u@[::1]:5433/runq",
    ],
)
def test_one_host_is_rendered_as_given(url: str) -> None:
    assert asyncpg_dsn(url) == url
    assert async_url(url) == url.replace("postgresql://", "postgresql+asyncpg://")


def test_a_socket_folder_goes_in_the_query() -> None:
    assert parse_url("postgresql://u@/db?host=/run/postgresql").hosts == (Host("/run/postgresql"),)
    assert asyncpg_dsn("postgresql://u@/db?host=/run/postgresql") == "postgresql://u@/db?host=/run/postgresql"
    assert asyncpg_dsn("postgresql://u@/db?host=/run/postgresql&port=5433") == (
        "postgresql://u@/db?host=/run/postgresql&port=5433"
    )


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u@a/db", "not a PostgreSQL URL"),
        ("postgresql://u@/db?host=a,b,c&port=1,2", "3 hosts but 2 ports"),
    ],
)
def test_refused(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_url(url)
