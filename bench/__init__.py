"""``make bench``: runq against PgQueuer, Procrastinate and raw SQL on one PostgreSQL, in one run."""
