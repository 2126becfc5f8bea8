"""The import targets of ``langgraph.json`` graphs (app/agents/langgraph/config.py): the attribute
``<graph id>@<config file>`` of this module is that graph's agent class, made once per process."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from app.agents.langgraph.server import ServerGraphAgent
from app.agents.langgraph_config import GraphConfigError, load_graph, read_config


@cache
def server_agent(graph_id: str, config_file: str) -> type[ServerGraphAgent]:
    """The agent class of one graph of the file."""
    config = read_config(Path(config_file))
    spec = config.graphs.get(graph_id)
    if spec is None:
        raise GraphConfigError(f"{config_file} has no graph {graph_id!r}")
    source = load_graph(spec, base=config.path.parent)
    return type(
        f"Graph_{graph_id}",
        (ServerGraphAgent,),
        {"graph_id": graph_id, "source": source, "__module__": __name__, "__qualname__": graph_id},
    )


def __getattr__(name: str) -> type[ServerGraphAgent]:
    graph_id, at, config_file = name.partition("@")
    if not at:
        raise AttributeError(name)
    return server_agent(graph_id, config_file)
