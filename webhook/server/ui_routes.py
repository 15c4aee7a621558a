"""The read-only web UI: static files shipped in the package under `webhook/ui/`, served at `/ui/`.

The files are read once into memory and served from a fixed table, so no request path ever reaches the
file system (no traversal, no directory listing). Every answer carries a content security policy that
allows only this origin and no inline code: the pages work offline and cannot be made to load or post
anything elsewhere. The pages read the JSON API (`/api/v1/...`) and never write to the cluster.
"""

from __future__ import annotations

import hashlib
import mimetypes
from dataclasses import dataclass
from pathlib import Path

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

UI_DIRECTORY = Path(__file__).resolve().parent.parent / "ui"
PREFIX = "/ui"
INDEX = "index.html"
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
    "form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    # The pages change with the package, not on their own: revalidate each time, cheap with the ETag.
    "Cache-Control": "no-cache",
}
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
}


@dataclass(frozen=True)
class Asset:
    body: bytes
    media_type: str
    etag: str


def load_assets(directory: Path = UI_DIRECTORY) -> dict[str, Asset]:
    """Every file under `directory`, by its path relative to it (POSIX separators)."""
    assets: dict[str, Asset] = {}
    for path in sorted(directory.rglob("*")):
        if not path.is_file() or path.name.startswith(".") or path.suffix in {".py", ".pyc"}:
            continue
        body = path.read_bytes()
        media_type = _TYPES.get(path.suffix) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        assets[path.relative_to(directory).as_posix()] = Asset(body, media_type, etag)
    return assets


def _not_found() -> Response:
    return Response(b"not found\n", 404, media_type="text/plain", headers=SECURITY_HEADERS)


def ui_router(directory: Path = UI_DIRECTORY) -> APIRouter:
    """GET / and GET /ui redirect to /ui/; GET /ui/ is the single page; GET /ui/<file> its CSS and JavaScript."""
    assets = load_assets(directory)
    router = APIRouter(include_in_schema=False)

    @router.api_route(PREFIX, methods=["GET", "HEAD"])
    async def ui_root(request: Request) -> Response:
        # Relative to the request, so the page also works behind a proxy that adds a path prefix.
        query = f"?{request.url.query}" if request.url.query else ""
        return RedirectResponse(f"{PREFIX.rsplit('/', 1)[-1]}/{query}", 308, headers=SECURITY_HEADERS)

    @router.api_route("/", methods=["GET", "HEAD"])
    async def site_root(request: Request) -> Response:
        # A person who opens the server's address lands on the page. 307, not 308: `/` may answer
        # something else one day, and browsers remember permanent redirects.
        query = f"?{request.url.query}" if request.url.query else ""
        return RedirectResponse(f"{PREFIX.lstrip('/')}/{query}", 307, headers=SECURITY_HEADERS)

    @router.api_route(PREFIX + "/{name:path}", methods=["GET", "HEAD"])
    async def ui_file(name: str, request: Request) -> Response:
        asset = assets.get(name or INDEX)
        if asset is None:
            return _not_found()
        headers = {**SECURITY_HEADERS, "ETag": asset.etag}
        if asset.etag in request.headers.get("if-none-match", ""):
            return Response(status_code=304, headers=headers)
        body = b"" if request.method == "HEAD" else asset.body
        response = Response(body, media_type=asset.media_type, headers=headers)
        if request.method == "HEAD":
            response.headers["content-length"] = str(len(asset.body))
        return response

    return router
