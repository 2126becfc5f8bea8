FROM python:3.11-slim
WORKDIR /srv/runq
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
COPY pyproject.toml README.md alembic.ini ./
COPY alembic ./alembic
COPY app ./app
RUN pip install -e . && useradd --system --no-create-home runq
USER runq
EXPOSE 8000
CMD ["runq", "api", "--host", "0.0.0.0", "--port", "8000"]
