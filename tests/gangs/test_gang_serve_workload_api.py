"""`kgwe serve` in a cluster (the model from the API, the controllers behind the Lease), a gang of two created through
both webhooks over HTTPS, with kube-apiserver's Workload API gates on and off: on, the members join the gang's
PodGroup and KGWE creates the Workload and PodGroup when it releases them; off, the classic gate and pin alone."""

from __future__ import annotations

import base64
import copy
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import jsonpatch
import orjson
import pytest
from gang_support import GangApiServer, cliques, member, review, with_nodes
from kube_fake_apiserver import write_kubeconfig
from server_support import ROOT, RunningServer, ask, free_port

from webhook.gangs.native import pod_group_name

GATES = {"on": {"workload_api": True, "topology_aware": True}, "off": {}}


def _serve(kubeconfig: Path, tmp_path: Path) -> tuple[subprocess.Popen[str], RunningServer]:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KGWE_STATE_DIR": str(tmp_path / "state"),
           "KGWE_TEST_KUBECONFIG": str(kubeconfig), "POD_NAMESPACE": "kgwe"}
    command = [sys.executable, "-m", "webhook.cli", "serve", "--host", "127.0.0.1", "--port", str(port), "--no-ui"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert process.stdout is not None
    ca_file = Path(process.stdout.readline().rsplit("CA: ", 1)[1].strip())
    server = RunningServer(f"https://127.0.0.1:{port}", ca_file, ca_file.parent, None)  # type: ignore[arg-type]
    deadline = time.monotonic() + 60
    while True:
        try:
            with server.client() as client:
                if client.get("/readyz").status_code == 200:
                    return process, server
        except httpx.TransportError:
            pass
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        assert time.monotonic() < deadline, "kgwe serve never became ready"
        time.sleep(0.1)


def _create(server: RunningServer, api: GangApiServer, pod: dict[str, Any]) -> dict[str, Any]:
    """A pod CREATE as kube-apiserver runs it: /mutate, the patch, /validate, then stored."""
    mutated = ask(server, "/mutate", review(pod))
    patch = orjson.loads(base64.b64decode(mutated["patch"])) if "patch" in mutated else []
    obj = jsonpatch.apply_patch(copy.deepcopy(pod), patch)
    assert ask(server, "/validate", review(obj))["allowed"] is True
    return api.put("Pod", obj)


@pytest.mark.parametrize("gates", sorted(GATES))
def test_a_gang_starts_whole_in_one_clique_with_the_workload_api_on_and_off(gates: str, tmp_path: Path) -> None:
    api = GangApiServer(**GATES[gates]).start()
    process = None
    try:
        with_nodes(api, cliques(2))
        api.put("Namespace", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}})
        process, server = _serve(write_kubeconfig(tmp_path / "kubeconfig", api.url), tmp_path)
        stored = [_create(server, api, member(f"w-{i}", "llm", 2)) for i in range(2)]
        name = pod_group_name("llm")
        for pod in stored:
            assert pod["spec"]["schedulingGates"] == [{"name": "kgwe.io/gang"}]
            assert pod["spec"].get("schedulingGroup") == ({"podGroupName": name} if gates == "on" else None)
        api.wait_for(lambda: not any(p["spec"].get("schedulingGates") for p in api.objects("Pod").values()), 30)
        cliques_pinned = {p["spec"]["nodeSelector"].get("kgwe.io/nvlink-clique") for p in api.objects("Pod").values()}
        assert len(cliques_pinned) == 1 and None not in cliques_pinned
        if gates == "on":
            (group,) = api.objects("PodGroup").values()
            assert group["metadata"]["name"] == name
            assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
            assert group["spec"]["schedulingConstraints"] == {"topology": [{"key": "kgwe.io/nvlink-clique"}]}
            assert list(api.objects("Workload")) == [f"ml/{name}"]
        else:
            assert not any(r.path.startswith("/apis/scheduling.k8s.io/v1alpha2/namespaces") for r in api.requests)
    finally:
        if process is not None:
            process.terminate()
            process.wait(20)
        api.close()
