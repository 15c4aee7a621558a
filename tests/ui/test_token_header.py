"""The UI's API reads carry the Kubernetes token it was given, and say plainly when the server wants one it
does not have (issue 30). webhook/ui/dom.js run by Node with a stand-in `fetch`, `document` and
`sessionStorage`: no browser needed (the pages themselves are driven in Chromium by test_pages.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

DOM_JS = Path(__file__).resolve().parents[2] / "webhook" / "ui" / "dom.js"

SCRIPT = """
const store = new Map();
globalThis.sessionStorage = {
  getItem: (k) => (store.has(k) ? store.get(k) : null),
  setItem: (k, v) => store.set(k, String(v)),
  removeItem: (k) => store.delete(k),
};
globalThis.document = { baseURI: "https://kgwe.example/ui/" };
const sent = [];
let status = 401;
globalThis.fetch = async (url, init) => {
  sent.push({ url: String(url), authorization: init.headers.Authorization ?? null });
  const body = status === 200 ? '{"tenants": []}' : '{"kind": "Status", "message": "server says no"}';
  return new Response(body, { status, headers: { "Content-Type": "application/json" } });
};
const dom = await import(process.argv[2]);
const outcome = async () => {
  try { return { ok: await dom.getJSON("tenants") }; } catch (e) { return { status: e.status, message: e.message }; }
};
const results = {};
results.without = await outcome();
dom.setApiToken("  tok-123 \\n");
results.stored = sessionStorage.getItem("kgwe.token");
results.rejected = await outcome();
status = 200;
results.accepted = await outcome();
dom.setApiToken("");
results.forgotten = sessionStorage.getItem("kgwe.token");
results.sent = sent;
console.log(JSON.stringify(results));
"""


def test_the_token_is_sent_and_its_absence_explained(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    script = tmp_path / "check.mjs"
    script.write_text(SCRIPT)
    module = tmp_path / "dom.mjs"  # .mjs: an ES module to Node whatever package.json is near
    module.write_text(DOM_JS.read_text())
    run = subprocess.run([node, str(script), module.as_uri()], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    results = json.loads(run.stdout)
    assert results["without"]["status"] == 401
    assert "needs a Kubernetes token" in results["without"]["message"]
    assert "kubectl create token" in results["without"]["message"]
    assert results["stored"] == "tok-123"
    assert results["rejected"]["status"] == 401 and "not accepted" in results["rejected"]["message"]
    assert results["accepted"] == {"ok": {"tenants": []}}
    assert results["forgotten"] is None
    assert [s["authorization"] for s in results["sent"]] == [None, "Bearer tok-123", "Bearer tok-123"]
    assert all(s["url"] == "https://kgwe.example/api/v1/tenants" for s in results["sent"])
