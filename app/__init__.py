"""runq: a PostgreSQL-backed control plane for long-running AI agent runs."""
