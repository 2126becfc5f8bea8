"""The ``runq`` command: its parser and dispatch (main), the database-backed operator commands'
output (console), ``runs follow`` (follow), ``hooks`` (hooks) and ``runq dev`` (dev)."""
