# The production image: runq without the embedded PostgreSQL extra (RUNQ_DATABASE_URL names the
# server) and without the test tools; with the otel extra, idle unless OTEL_* asks for traces, and
# with the Python client, so `runq runs follow` works inside a container. An editable install
# keeps alembic/ next to app/.
# A team's agents: an image built FROM this one with its modules in /srv/runq, the working
# directory, which RUNQ_AGENTS imports from (examples/own-agent/).
FROM python:3.11-slim
WORKDIR /srv/runq
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
COPY pyproject.toml README.md alembic.ini ./
COPY alembic ./alembic
COPY clients/python ./clients/python
COPY app ./app
RUN pip install -e '.[otel]' ./clients/python && useradd --system --no-create-home runq
USER runq
EXPOSE 8000
# The API's health check is in docker-compose.yml: the same image also runs workers, which serve no HTTP.
CMD ["runq", "api", "--host", "0.0.0.0", "--port", "8000"]
