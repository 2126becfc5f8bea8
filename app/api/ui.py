"""The operator web UI: static files shipped in ``app/ui``, served at ``/ui``; and the browser
client module the UI is built on, ``app/ui/client.js``, served at ``/client.js`` for any page.

The page is plain HTML, CSS and JavaScript modules that talk to this same API with the key the
operator signs in with; nothing here touches the database. A strict Content-Security-Policy keeps
the page to its own origin, so it works offline and cannot load anything from elsewhere.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse
from starlette.exceptions import HTTPException

UI_DIR = Path(__file__).resolve().parent.parent / "ui"
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidate on every load, so a new release never runs with a stale module next to it.
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


def _file(relative: str, headers: dict[str, str] = HEADERS) -> FileResponse:
    path = (UI_DIR / relative).resolve()
    media_type = MEDIA_TYPES.get(path.suffix)
    if media_type is None or not path.is_relative_to(UI_DIR) or not path.is_file():
        raise HTTPException(404, "no such file")
    return FileResponse(path, media_type=media_type, headers=headers)


@router.get("/client.js")
async def client_module() -> FileResponse:
    """Public code, no key: a page of another origin imports it as a module, which browsers
    fetch in CORS mode."""
    return _file("client.js", HEADERS | {"Access-Control-Allow-Origin": "*"})


@router.get("/ui")
@router.get("/ui/")
async def index() -> FileResponse:
    return _file("index.html")


@router.get("/ui/{asset:path}")
async def asset(asset: str) -> FileResponse:
    return _file(asset)
