"""The repository stands on its own: a user who clones it gets every document its text refers to.

README.md and docs/ once linked to a design file in a folder next to the checkout, and code
cited its sections: files a user who clones the repository does not have. The contract is
docs/contract.md now.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)|\b(?:href|src)=\"([^\"]+)\"")
# Spelt in two parts, so this file does not match itself.
OUTSIDE_NAMES = ("../" + "shared", "DESIGN" + ".md")
SOURCES = [
    path
    for folder in ("app", "tests", "docs", "alembic", "bench")
    for path in (ROOT / folder).rglob("*")
    if path.suffix in {".py", ".md", ".js", ".html", ".css", ".toml", ".yml"} and "artifacts" not in path.parts
] + [ROOT / "README.md", ROOT / "Makefile", ROOT / "docker-compose.yml", ROOT / "Dockerfile"]


def _outside_links(document: Path, root: Path = ROOT) -> list[str]:
    bad = []
    for n, line in enumerate(document.read_text().splitlines(), 1):
        for match in LINK.finditer(line):
            target = match[1] or match[2]
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL or an anchor in the same page
            where = (document.parent / target.split("#", 1)[0]).resolve()
            if root not in (where, *where.parents):
                bad.append(f"{document.relative_to(root)}:{n}: {target} leaves the repository")
            elif not where.exists():
                bad.append(f"{document.relative_to(root)}:{n}: {target} does not exist")
    return bad


def test_readme_and_docs_link_only_inside_the_repository() -> None:
    assert (ROOT / "docs" / "contract.md").is_file()
    bad = [problem for document in DOCUMENTS for problem in _outside_links(document)]
    assert not bad, "\n".join(bad)


def test_nothing_cites_a_file_outside_the_repository() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in SOURCES
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if any(name in line for name in OUTSIDE_NAMES)
    ]
    assert not bad, "\n".join(bad)


def test_the_link_check_finds_what_it_should(tmp_path: Path) -> None:
    """The check itself: an outside link and a missing file are caught, URLs and anchors are not."""
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "api.md").write_text("")
    page = root / "docs" / "page.md"
    page.write_text("[a](../../elsewhere.md) [b](missing.md) [c](https://example.org) [d](#x) [e](api.md)\n")
    found = _outside_links(page, root.resolve())
    assert [f.split(": ", 1)[1] for f in found] == [
        "../../elsewhere.md leaves the repository",
        "missing.md does not exist",
    ]
