# The production image: runq without the embedded PostgreSQL extra (RUNQ_DATABASE_URL names the
# server) and without the test tools; with the otel extra, idle unless OTEL_* asks for traces. An editable install keeps alembic/ next to app/.
FROM python:3.11-slim
WORKDIR /srv/runq
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
COPY pyproject.toml README.md alembic.ini ./
COPY alembic ./alembic
COPY app ./app
RUN pip install -e '.[otel]' && useradd --system --no-create-home runq
USER runq
EXPOSE 8000
# The API's health check is in docker-compose.yml: the same image also runs workers, which serve no HTTP.
CMD ["runq", "api", "--host", "0.0.0.0", "--port", "8000"]
