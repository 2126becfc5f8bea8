"""Database plumbing: engines, the schema, migrations and the embedded server."""
