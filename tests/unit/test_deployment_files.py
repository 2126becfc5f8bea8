"""docker-compose.yml, the Dockerfile and .dockerignore, checked without a Docker daemon."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.cli.main import _parser
from app.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def _compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def _default(value: str, env: dict[str, str] | None = None) -> str:
    """What compose substitutes with the variables of ``env`` set (``.env``) and the others
    unset: ``${VAR:-default}``, ``${VAR:?error}`` and ``${VAR}``."""
    env = env or {}

    def one(match: re.Match[str]) -> str:
        name, op, fallback = match.group(1), match.group(2), match.group(3) or ""
        if env.get(name):
            return env[name]
        assert op != ":?", f"{name} is required: {fallback}"
        return fallback if op == ":-" else ""

    return re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", one, value)


def _env_example() -> dict[str, str]:
    lines = (ROOT / ".env.example").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


SECRETS = {"POSTGRES_PASSWORD": "s3cretpw", "RUNQ_SECRET_KEY": "k" * 32}


def test_compose_has_the_production_shape() -> None:
    services = _compose()["services"]
    # the optional collector runs only with its profile (docker compose --profile tracing up)
    assert {n for n, s in services.items() if "profiles" not in s} == {"postgres", "migrate", "api", "worker"}
    assert services["jaeger"]["profiles"] == ["tracing"]
    assert services["pgbouncer"]["profiles"] == ["pgbouncer"]
    for name in ("migrate", "api", "worker"):
        env = services[name]["environment"]
        assert env["RUNQ_ENV"] == "production"
        assert _default(env["RUNQ_DATABASE_URL"], SECRETS) == "postgresql://runq:s3cretpw@postgres:5432/runq"
        assert _default(env["RUNQ_LISTEN_DATABASE_URL"], SECRETS) == "postgresql://runq:s3cretpw@postgres:5432/runq"
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
    # no [embedded], no [dev]; traces only when OTEL_* asks; the client for `runq runs follow`
    assert installs == ["-e '.[otel]' ./clients/python "], installs
    assert "COPY clients/python ./clients/python" in dockerfile
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".venv/", ".runq/", ".git/", ".env"} <= ignored


def test_readme_says_how_to_create_the_first_key_in_compose() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "docker compose up" in readme
    assert "docker compose run --rm api runq keys create --tenant" in readme


def test_the_password_is_written_once_in_env_and_required() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    assert "runq:runq@" not in text and '"runq" "runq"' not in text
    assert text.count("${POSTGRES_PASSWORD:?") == 2  # postgres's own and the URLs': unset = refused
    compose = _compose()
    with pytest.raises(AssertionError, match="POSTGRES_PASSWORD is required"):
        _default(compose["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"])
    assert _default(compose["configs"]["pgbouncer_users"]["content"], SECRETS) == '"runq" "s3cretpw"\n'
    example = _env_example()
    assert set(SECRETS) <= set(example) and not any(example[name] for name in SECRETS)  # the user fills them
    assert ".env" in (ROOT / ".gitignore").read_text().split()


def test_every_variable_compose_reads_is_in_env_example() -> None:
    used = set(re.findall(r"\$\{(\w+)", (ROOT / "docker-compose.yml").read_text()))
    documented = set(re.findall(r"^#? ?(\w+)=", (ROOT / ".env.example").read_text(), re.M))
    assert used - documented <= {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_SAMPLER", "RUNQ_IMAGE"}


def test_published_ports_are_this_machine_only_by_default() -> None:
    services = _compose()["services"]
    for name in ("api", "jaeger"):
        for port in services[name]["ports"]:
            assert _default(port, _env_example()).startswith("127.0.0.1:"), (name, port)
    assert _default(services["api"]["ports"][0], {"RUNQ_API_BIND": "0.0.0.0"}) == "0.0.0.0:8000:8000"


def test_the_pgbouncer_profile_says_which_compose_it_needs() -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    assert "2.23.1" in text  # inline `configs.content` came with Compose 2.23.1
    url = _compose()["x-runq"]["environment"]["RUNQ_DATABASE_URL"]
    assert _default(url, SECRETS | {"RUNQ_DB_HOST": "pgbouncer:6432"}) == "postgresql://runq:s3cretpw@pgbouncer:6432/runq"


def test_the_image_is_built_here_never_pulled_by_its_name() -> None:
    runq = _compose()["x-runq"]
    assert (runq["image"], runq["pull_policy"]) == ("${RUNQ_IMAGE:-runq}", "build")
