"""Guards on what leaves the process: secrets masked in logs and events (redact), requests to
private and loopback addresses refused (ssrf), webhook bodies signed (signing)."""
