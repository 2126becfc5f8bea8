"""docs/architecture.md stays true: every module it names exists, and app/ has no import cycle."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"


def test_every_module_the_page_names_exists() -> None:
    named = set(re.findall(r"`((?:app|alembic|tests)/[\w/.]*)`", DOC.read_text(encoding="utf-8")))
    assert len(named) > 30  # the map names the modules, not a handful
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert missing == []


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("app"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("app"))
    return found


def test_app_has_no_import_cycle() -> None:
    modules = {}
    for path in (ROOT / "app").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = _imports(path)
    graph = {name: {dep for dep in deps if dep in modules and dep != name} for name, deps in modules.items()}
    # A cycle exists iff a topological order does not: peel off modules that import nothing left.
    remaining = dict(graph)
    while True:
        leaves = [name for name, deps in remaining.items() if not deps & remaining.keys()]
        if not leaves:
            break
        for name in leaves:
            del remaining[name]
    assert sorted(remaining) == []
