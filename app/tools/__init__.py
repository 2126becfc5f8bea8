"""Tools the runtime offers to agents."""
