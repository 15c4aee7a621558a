"""What the agent exports is what KGWE reads: a real Prometheus (Debian's, as tests/usage starts it) scrapes the
agent's /metrics every second, and the webhook's own usage reader (`webhook.usage.history.read_history`,
the queries `kgwe recommend` and the usage table run) reads the pods' history back from it.

Prometheus scrapes the guarded door, as in a cluster and as docs/usage.md configures it: HTTPS with the
agent's self-signed certificate (`insecure_skip_verify`) and its service account's token
(`authorization.credentials_file`), which the fake API server authenticates and allows `get /metrics`."""

from __future__ import annotations

import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import nvml_machines as machines
import pytest
from fake_nvml import FakeProcess, installed
from kube_fake_apiserver import TOKEN_REVIEWS, FakeApiServer
from kubelet_podresources import Container, Kubelet, Pod
from kubernetes import client
from patience import WAIT_SECONDS
from usage_traces import PrometheusMissing, ensure_prometheus, free_port

from agent.metrics_auth import MetricsAuth
from agent.metrics_http import MetricsServer
from agent.podresources import PodResourcesClient
from agent.usage_metrics import UsageCollector, registry_for
from agent.usage_nvml import UsageReader
from webhook.config import Usage
from webhook.usage.history import UsageHistory, read_history
from webhook.usage.prometheus import PrometheusClient

NODE = "gpu-node-7"
MODEL = "NVIDIA A100-SXM4-80GB"


@contextmanager
def prometheus_scraping(target: str, token: str) -> Iterator[str]:
    """Prometheus scraping https://`target`/metrics every second with `token`, as the docs' scrape configuration
    says (the exporter's own namespace/pod labels honoured)."""
    try:
        prometheus, _ = ensure_prometheus()
    except PrometheusMissing as exc:
        pytest.skip(str(exc))
    with tempfile.TemporaryDirectory(prefix="kgwe-prom-") as tmp, ExitStack() as stack:
        root = Path(tmp)
        config = root / "prometheus.yml"
        token_file = root / "token"
        token_file.write_text(token, encoding="utf-8")
        config.write_text(
            "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1h}\n"
            "scrape_configs:\n"
            "- {job_name: kgwe-agent, honor_labels: true, scheme: https,\n"
            f"   authorization: {{credentials_file: '{token_file}'}}, tls_config: {{insecure_skip_verify: true}},\n"
            f"   static_configs: [{{targets: ['{target}']}}]}}\n",
            encoding="utf-8")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = stack.enter_context((root / "prometheus.log").open("wb"))
        process = subprocess.Popen(
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={root / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while True:
                assert process.poll() is None, (root / "prometheus.log").read_text(errors="replace")[-2000:]
                try:
                    with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:
                        if answer.status == 200:
                            break
                except OSError:
                    pass
                assert time.monotonic() < deadline, "prometheus did not become ready"
                time.sleep(0.2)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _history(url: str, wanted: int) -> UsageHistory:
    usage = Usage(interval="2s", lookback="30s", chunk="1h")
    client = PrometheusClient(url, timeout_seconds=10)
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        history = read_history(client, usage, end=time.time())
        complete = [p for p in history.pods.values() if p.devices.count and len(p.memory) >= 2]
        if len(complete) >= wanted:
            return history
        assert time.monotonic() < deadline, f"Prometheus never held the agent's series: {history.pods}"
        time.sleep(0.5)


def test_the_webhooks_usage_reader_reads_the_agents_series(kubelet: Kubelet) -> None:
    api = FakeApiServer().start()
    api.add_user("prometheus-token", "system:serviceaccount:monitoring:prometheus")
    api.allow("system:serviceaccount:monitoring:prometheus", "get", url="/metrics")
    system = machines.hgx_a100_80gb_mig_mixed()  # GPU 0 and 1 in MIG mode, 2-7 whole
    now_us = int(time.time() * 1_000_000)
    gpu2, gpu3 = system.gpus[2], system.gpus[3]
    gpu2.processes = [FakeProcess(4242, 30_000, [(now_us, 60)])]
    gpu3.processes = [FakeProcess(4250, 10_000, [(now_us, 20)])]
    gpu2.utilization_gpu, gpu3.utilization_gpu = 61, 22
    slice_ = system.gpus[1].mig[0]  # 1g.10gb
    slice_.processes = [FakeProcess(5151, 3_000)]
    system.gpus[4].processes = [FakeProcess(6000, 7_000)]  # a process on a GPU no pod holds
    kubelet.pods = [
        Pod("team-a", "train-0", [Container("main", {"nvidia.com/gpu": [gpu2.uuid, gpu3.uuid]})]),
        Pod("team-b", "infer-0", [Container("server", {"nvidia.com/mig-1g.10gb": [slice_.uuid]})]),
    ]
    with ExitStack() as stack:
        stack.callback(api.close)
        configuration = client.Configuration()
        configuration.host = api.url
        api_client = stack.enter_context(client.ApiClient(configuration))
        stack.enter_context(installed(system))
        reader = UsageReader(window=600.0)
        reader.open()
        stack.callback(reader.close)
        pods = PodResourcesClient(str(kubelet.socket))
        stack.callback(pods.close)
        server = MetricsServer(registry_for(UsageCollector(reader, pods, None, hostname=NODE)), 0, "127.0.0.1",
                               auth=MetricsAuth.for_api_client(api_client))
        stack.callback(server.close)
        url = stack.enter_context(prometheus_scraping(f"127.0.0.1:{server.port}", "prometheus-token"))
        history = _history(url, wanted=2)
        assert api.reviews(TOKEN_REVIEWS), "Prometheus scraped with its token"

    assert set(history.pods) == {("team-a", "train-0"), ("team-b", "infer-0")}  # idle GPUs are no pod's
    train = history.pods[("team-a", "train-0")]
    assert max(train.memory.values()) == 30_000  # its busiest GPU, MiB
    assert max(train.total.values()) == 40_000  # both of its GPUs
    assert max(train.activity.values()) == pytest.approx(0.60)  # PROF_GR_ENGINE_ACTIVE, read before GPU_UTIL
    assert train.devices.models == {(MODEL, ""): 2} and train.devices.host == NODE

    infer = history.pods[("team-b", "infer-0")]
    assert set(infer.memory.values()) == {3_000}
    assert infer.devices.models == {(MODEL, "1g.10gb"): 1} and infer.devices.host == NODE
    # No activity for the MIG instance: NVML gave none per process there, and DCGM has no GPU_UTIL for MIG.
    assert infer.activity == {}
