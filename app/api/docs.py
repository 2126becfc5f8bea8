"""``/redoc`` from the ReDoc file the fastapi-offline wheel ships (``/docs`` comes with it as is).

ReDoc's sidebar always shows a logo loaded from its vendor's CDN: the script is served with
that one URL pointing at a file of ours instead, and a Content-Security-Policy keeps anything
else the page might load on this origin. Without both, /redoc reached the internet.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html
from fastapi.responses import HTMLResponse, Response

STATIC = "/static-offline-docs"  # where fastapi-offline mounts its files
REDOC_JS = Path(fastapi_offline.__file__).parent / "static" / "redoc.standalone.js"
CDN_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"
SAME_ORIGIN_ONLY = (
    "default-src 'self'; img-src 'self' data:; worker-src 'self' blob:;"
    " script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'"
)

router = APIRouter(include_in_schema=False)


@lru_cache(maxsize=1)
def _redoc_script() -> bytes:
    return REDOC_JS.read_bytes().replace(CDN_LOGO, f"{STATIC}/favicon.png".encode())


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    page = get_redoc_html(
        openapi_url=f"{root}{request.app.openapi_url}",
        title=f"{request.app.title} - ReDoc",
        redoc_js_url=f"{root}/redoc/redoc.standalone.js",
        redoc_favicon_url=f"{root}{STATIC}/favicon.png",
        with_google_fonts=False,
    )
    page.headers["Content-Security-Policy"] = SAME_ORIGIN_ONLY
    return page


@router.get("/redoc/redoc.standalone.js")
async def redoc_script() -> Response:
    return Response(
        _redoc_script(),
        media_type="text/javascript",
        headers={"Cache-Control": "public, max-age=86400"},
    )
