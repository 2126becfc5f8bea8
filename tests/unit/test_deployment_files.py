"""docker-compose.yml, the Dockerfile and .dockerignore, checked without a Docker daemon."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from app.cli import _parser
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def _default(value: str) -> str:
    """What compose substitutes for ``${VAR:-default}`` when VAR is unset."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", value)


def test_compose_has_the_production_shape() -> None:
    services = _compose()["services"]
    # the optional collector runs only with its profile (docker compose --profile tracing up)
    assert {n for n, s in services.items() if "profiles" not in s} == {"postgres", "migrate", "api", "worker"}
    assert services["jaeger"]["profiles"] == ["tracing"]
    assert services["pgbouncer"]["profiles"] == ["pgbouncer"]
    for name in ("migrate", "api", "worker"):
        env = services[name]["environment"]
        assert env["RUNQ_ENV"] == "production"
        assert re.fullmatch(r"postgresql://\w+:\w+@postgres:5432/\w+", _default(env["RUNQ_DATABASE_URL"]))
        assert re.fullmatch(r"postgresql://\w+:\w+@postgres:5432/\w+", env["RUNQ_LISTEN_DATABASE_URL"])
        assert services[name]["build"] == "."
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for name in ("api", "worker"):
        assert services[name]["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}


def test_pgbouncer_is_optional_and_in_transaction_mode() -> None:
    compose = _compose()
    bouncer = compose["services"]["pgbouncer"]
    assert bouncer["profiles"] == ["pgbouncer"]
    assert "apt-get install -y --no-install-recommends pgbouncer" in bouncer["build"]["dockerfile_inline"]
    ini = compose["configs"]["pgbouncer_ini"]["content"]
    assert "pool_mode = transaction" in ini and "listen_port = 6432" in ini
    for name in ("migrate", "api", "worker"):  # on by default, off when the pooler is used
        assert _default(compose["services"][name]["environment"]["RUNQ_DB_PREPARED_STATEMENTS"]) == "true"


def test_the_commands_are_real_runq_commands() -> None:
    services = _compose()["services"]
    for name in ("migrate", "worker"):
        command = services[name]["command"]
        assert command[0] == "runq"
        _parser().parse_args(command[1:])  # argparse exits on a command runq does not have
    assert services["api"]["command"][:2] == ["uvicorn", "app.main:app"]


def test_api_health_check_asks_readyz() -> None:
    check = _compose()["services"]["api"]["healthcheck"]
    assert check["test"][0] == "CMD" and "http://127.0.0.1:8000/readyz" in " ".join(check["test"])


def test_workers_get_longer_than_their_grace_to_stop() -> None:
    grace = Settings(env="development").shutdown_grace_s
    stop = _compose()["services"]["worker"]["stop_grace_period"]
    assert stop.endswith("s") and float(stop[:-1]) > grace


def test_the_image_leaves_out_the_embedded_server_and_the_virtualenv() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    installs = re.findall(r"pip install ([^&\n]+)", dockerfile)
    assert installs == ["-e '.[otel]' "], installs  # no [embedded], no [dev]; traces only when OTEL_* asks
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".venv/", ".runq/", ".git/"} <= ignored


def test_readme_says_how_to_create_the_first_key_in_compose() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "docker compose up" in readme
    assert "docker compose run --rm api runq keys create --tenant" in readme
