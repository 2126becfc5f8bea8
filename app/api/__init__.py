"""The HTTP API: routes, auth, problems, SSE and the process-wide LISTEN fan-out."""
