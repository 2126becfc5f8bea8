"""The chat frontends' own protocols, served from runq's event log (docs/frontends.md)."""
