"""Agents: the ``Agent`` protocol, the run context they receive, and the built-in agents."""
