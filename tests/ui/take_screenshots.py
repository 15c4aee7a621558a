"""Screenshots of the web UI for docs/ui.md, taken the way the tests see it: `kgwe serve --cluster
examples/cluster` in a headless Debian chromium at 1280x800.

    .venv/bin/python tests/ui/take_screenshots.py [OUTPUT_DIR]     # default docs/images
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from ui_harness import ROOT, VIEWPORT, chromium_browser, ensure_chromium, kgwe_serve


def main(argv: list[str]) -> int:
    output = Path(argv[0]) if argv else ROOT / "docs" / "images"
    output.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as workdir, kgwe_serve(Path(workdir)) as server, \
            chromium_browser(ensure_chromium()) as browser:
        context = browser.new_context(ignore_https_errors=True, viewport=VIEWPORT, color_scheme="light")
        page = context.new_page()

        def shot(name: str) -> None:
            page.screenshot(path=str(output / f"ui-{name}.png"))
            print(output / f"ui-{name}.png")

        page.goto(f"{server.url}/ui/#/nodes")
        page.wait_for_selector("#node-table tr.node")
        shot("nodes")

        page.select_option("#type-filter", "nvidia-a100-80gb")
        page.check('tr.group[data-group="nvidia-a100-80gb"] input.select-group')
        page.click("#propose")
        page.wait_for_selector("#proposal-yaml")
        page.locator("#proposal").scroll_into_view_if_needed()
        page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
        shot("create-profile")

        page.goto(f"{server.url}/ui/#/profiles")
        page.wait_for_selector("article.profile")
        shot("profiles")

        page.goto(f"{server.url}/ui/#/tenants")
        page.wait_for_selector("article.tenant")
        shot("tenants")
        context.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
