"""`kgwe serve` without --cluster: the cluster model comes from the API (list + watch), as in a cluster."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
import yaml
from kube_fake_apiserver import serving_cluster, write_kubeconfig
from server_support import CLUSTER, CONFIG, PODS, ROOT, RunningServer, ask, free_port, load_pod

from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.review import create_review, review_pod


@pytest.fixture
def api_with_example_cluster(tmp_path: Path) -> Iterator[Path]:
    server = serving_cluster(CLUSTER)
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server.url)
    try:
        yield kubeconfig
    finally:
        server.close()


def test_serve_from_the_api_answers_like_the_yaml_directory(api_with_example_cluster: Path, tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KGWE_STATE_DIR": str(tmp_path / "state"),
           "KGWE_TEST_KUBECONFIG": str(api_with_example_cluster), "POD_NAMESPACE": "kgwe"}
    # The example's configuration with a deadline the first (cold) review cannot come near on a busy machine:
    # its answer is compared with an offline review's, which the deadline's fallback would not match.
    config = yaml.safe_load(CONFIG.read_text())
    config.setdefault("limits", {})["deadlineSeconds"] = 30.0
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "webhook.cli", "serve", "--config", str(tmp_path / "config.yaml"),
               "--host", "127.0.0.1", "--port", str(port), "--no-ui"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        assert process.stdout is not None
        ca_file = Path(process.stdout.readline().rsplit("CA: ", 1)[1].strip())
        server = RunningServer(f"https://127.0.0.1:{port}", ca_file, ca_file.parent, None)  # type: ignore[arg-type]
        deadline = time.monotonic() + 60
        while True:
            try:
                with server.client() as client:
                    if client.get("/readyz").status_code == 200:
                        break
            except httpx.TransportError:
                pass
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "kgwe serve never became ready"
            time.sleep(0.1)
        pod = load_pod(PODS[0])
        offline = review_pod(build_runtime(load_config(CONFIG), CLUSTER).admission, pod)
        answer = ask(server, "/mutate", create_review(pod, "kgwe-review", []))
        assert answer["allowed"] is True
        assert orjson.loads(base64.b64decode(answer["patch"])) == offline.patch
    finally:
        process.terminate()
        process.wait(20)
