"""How `kgwe serve` serves the UI's files over HTTPS: only the shipped files, under a policy that allows no
inline code and nothing from elsewhere, revalidated by ETag; `--no-ui` serves none of it."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from ui_harness import EXAMPLE_CLUSTER, KgweServer, kgwe_serve

from webhook.server.ui_routes import UI_DIRECTORY, load_assets

pytestmark = pytest.mark.timeout(120)


class _Markup(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.references: list[str] = []
        self.inline: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        self.inline += [f"{tag} {name}=" for name, _ in attrs if name.startswith("on") or name == "style"]
        if tag == "style":
            self.inline.append("<style>")
        if tag == "script" and not values.get("src"):
            self.inline.append("<script> without src")
        for name in ("src", "href"):
            value = values.get(name)
            if value and tag in ("script", "link"):
                self.references.append(value)


def test_ui_redirects_and_serves_the_page_under_a_strict_policy(server: KgweServer) -> None:
    with server.api() as client:
        redirect = client.get("/ui")
        assert redirect.status_code == 308
        assert client.get("/ui", follow_redirects=True).url.path == "/ui/"

        page = client.get("/ui/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert "default-src 'self'" in policy and "unsafe-inline" not in policy and "frame-ancestors 'none'" in policy
        assert page.headers["x-content-type-options"] == "nosniff"

        markup = _Markup()
        markup.feed(page.text)
        assert markup.inline == []
        assert markup.references, "the page loads its script and style sheet"
        for reference in markup.references:
            if reference.startswith("data:"):
                continue
            assert not re.match(r"^[a-z]+://|^//", reference), f"{reference} is not served by KGWE"
            asset = client.get(f"/ui/{reference}")
            assert asset.status_code == 200, reference
            assert "content-security-policy" in asset.headers


def test_only_shipped_files_are_served(server: KgweServer) -> None:
    shipped = load_assets()
    assert {"index.html", "app.js", "dom.js", "kgwe.css"} <= set(shipped)
    with server.api() as client:
        for name in shipped:
            assert client.get(f"/ui/{name}").content == (UI_DIRECTORY / name).read_bytes()
        assert client.get("/ui/app.js").headers["content-type"].startswith("text/javascript")
        for path in ("/ui/missing.js", "/ui/../server/app.py", "/ui/%2e%2e/server/app.py", "/ui/..%2fcli.py"):
            assert client.get(path).status_code == 404, path


def test_assets_are_revalidated_by_etag(server: KgweServer) -> None:
    with server.api() as client:
        first = client.get("/ui/app.js")
        etag = first.headers["etag"]
        assert first.headers["cache-control"] == "no-cache"
        again = client.get("/ui/app.js", headers={"If-None-Match": etag})
        assert again.status_code == 304 and again.content == b""
        head = client.head("/ui/app.js")
        assert head.status_code == 200 and int(head.headers["content-length"]) == len(first.content)


def test_pages_only_read(server: KgweServer) -> None:
    # The UI has no write path: its scripts only GET, and nothing under /ui/ accepts another method.
    for script in UI_DIRECTORY.glob("*.js"):
        source = script.read_text()
        assert not re.search(r"method\s*:\s*['\"](?!GET)", source, re.IGNORECASE), script.name
    with server.api() as client:
        assert client.post("/ui/", content=b"x").status_code == 405


def test_no_ui_switch_serves_the_webhooks_without_the_pages(tmp_path: Path) -> None:
    with kgwe_serve(tmp_path, EXAMPLE_CLUSTER, "--no-ui") as bare, bare.api() as client:
        assert client.get("/ui/").status_code == 404
        assert client.get("/healthz").status_code == 200
