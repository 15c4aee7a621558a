"""The agent's /metrics end to end: the fake NVML driver under the real pynvml binding, a fake kubelet serving
PodResources over gRPC on a unix socket, the agent's HTTP server, and the text it serves parsed back with
prometheus_client's parser. The series and labels must be the DCGM exporter's, as webhook/usage reads them."""

from __future__ import annotations

import logging
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nvml_machines as machines
import pytest
from agent_node_api import NodeApi
from fake_nvml import FakeProcess, FakeSystem, installed
from kubelet_podresources import Claim, Container, Kubelet, Pod, serving, short_dir
from patience import WAIT_SECONDS
from ports import free_port
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from waiting import eventually

from agent.dra_devices import DraDevices, slices_from_api
from agent.main import run
from agent.metrics_http import MetricsServer
from agent.podresources import PodResourcesClient
from agent.usage_metrics import (
    ENGINE_ACTIVE,
    FB_USED,
    GPU_UTIL,
    NVML_UP,
    POD_RESOURCES_UP,
    UsageCollector,
    device_id_key,
    registry_for,
)
from agent.usage_nvml import UsageReader
from webhook.usage import promql

NODE = "gpu-node-1"
DEVICE_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}
POD_LABELS = {"namespace", "pod", "container"}
MIG_LABELS = {"GPU_I_PROFILE", "GPU_I_ID"}


def _now_us() -> int:
    return int(time.time() * 1_000_000)


@dataclass
class Exporter:
    url: str
    system: FakeSystem
    collector: UsageCollector

    def scrape(self) -> dict[str, list[Sample]]:
        with urllib.request.urlopen(self.url, timeout=10) as answer:
            assert answer.status == 200
            text = answer.read().decode()
        return {family.name: list(family.samples) for family in text_string_to_metric_families(text)}


@contextmanager
def exporting(system: FakeSystem, socket_path: Path | None, dra: DraDevices | None = None) -> Iterator[Exporter]:
    with ExitStack() as stack:
        stack.enter_context(installed(system))
        reader = UsageReader()
        reader.open()
        stack.callback(reader.close)
        pods = None
        if socket_path is not None:
            pods = PodResourcesClient(str(socket_path), min_interval=0.0, timeout=WAIT_SECONDS)
            stack.callback(pods.close)
        collector = UsageCollector(reader, pods, dra, hostname=NODE)
        server = MetricsServer(registry_for(collector), 0, "127.0.0.1")
        stack.callback(server.close)
        yield Exporter(f"http://127.0.0.1:{server.port}/metrics", system, collector)


def _series(samples: dict[str, list[Sample]], name: str, **labels: str) -> list[Sample]:
    return [s for s in samples.get(name, []) if all(s.labels.get(k) == v for k, v in labels.items())]


def _one(samples: dict[str, list[Sample]], name: str, **labels: str) -> Sample:
    found = _series(samples, name, **labels)
    assert len(found) == 1, f"{name}{labels}: {found}"
    return found[0]


def _value(samples: dict[str, list[Sample]], name: str) -> float:
    return _one(samples, name).value


def test_every_exported_name_is_one_the_webhook_reads() -> None:
    assert {FB_USED, GPU_UTIL, ENGINE_ACTIVE} == {promql.FB_USED, promql.GPU_UTIL, promql.ENGINE_ACTIVE}
    # The labels the webhook groups devices by are exported (the lower-case host label is the newer one).
    assert set(promql.DEVICE_LABELS) - {"hostname"} <= DEVICE_LABELS | POD_LABELS | MIG_LABELS


def test_per_pod_memory_and_activity_of_whole_gpus(kubelet: Kubelet) -> None:
    system = machines.dgx_h100()
    now = _now_us()
    gpu2, gpu3 = system.gpus[2], system.gpus[3]
    gpu2.utilization_gpu, gpu3.utilization_gpu = 64, 30
    gpu2.processes = [FakeProcess(4242, 30_000, [(now - 1_000_000, 60)])]
    gpu3.processes = [FakeProcess(4250, 10_000, [(now - 1_000_000, 20)]), FakeProcess(4251, 2_000, [(now, 15)])]
    kubelet.pods = [Pod("team-a", "train-0", [Container("main", {"nvidia.com/gpu": [gpu2.uuid, gpu3.uuid]})])]
    with exporting(system, kubelet.socket) as exporter:
        samples = exporter.scrape()
    memory = _one(samples, FB_USED, UUID=gpu2.uuid)
    assert memory.labels == {
        "gpu": "2", "UUID": gpu2.uuid, "pci_bus_id": "00000000:3A:00.0", "device": "nvidia2",
        "modelName": "NVIDIA H100 80GB HBM3", "Hostname": NODE, "DCGM_FI_DRIVER_VERSION": "550.90.07",
        "namespace": "team-a", "pod": "train-0", "container": "main",
    }
    assert memory.value == 30_000  # the pod's processes, MiB
    assert _one(samples, FB_USED, UUID=gpu3.uuid, pod="train-0").value == 12_000
    assert _one(samples, GPU_UTIL, UUID=gpu2.uuid, pod="train-0").value == 64
    assert _one(samples, ENGINE_ACTIVE, UUID=gpu2.uuid, pod="train-0").value == pytest.approx(0.60)
    assert _one(samples, ENGINE_ACTIVE, UUID=gpu3.uuid, pod="train-0").value == pytest.approx(0.35)
    assert _value(samples, POD_RESOURCES_UP) == 1 and _value(samples, NVML_UP) == 1


def test_an_idle_gpu_has_one_series_without_pod_labels(kubelet: Kubelet) -> None:
    system = machines.dgx_h100()
    kubelet.pods = [Pod("team-a", "train-0", [Container("main", {"nvidia.com/gpu": [system.gpus[2].uuid]})])]
    with exporting(system, kubelet.socket) as exporter:
        samples = exporter.scrape()
    idle = _one(samples, FB_USED, UUID=system.gpus[0].uuid)
    assert set(idle.labels) == DEVICE_LABELS and idle.value == 512  # the device's used memory
    assert len(samples[FB_USED]) == 8 and len(samples[GPU_UTIL]) == 8
    assert [s.labels["gpu"] for s in samples[FB_USED] if "pod" in s.labels] == ["2"]


def test_mig_instances_carry_their_profile_and_instance_id(kubelet: Kubelet) -> None:
    system = machines.hgx_a100_80gb_mig_mixed()
    gpu0 = system.gpus[0]
    big, small = gpu0.mig[0], gpu0.mig[2]  # GI 2 (3g.40gb), GI 9 (1g.10gb)
    big.processes = [FakeProcess(77, 25_000)]
    small.processes = [FakeProcess(78, 3_000, [(_now_us(), 45)])]
    small.process_utilization = True
    kubelet.pods = [
        Pod("team-b", "infer-0", [Container("server", {"nvidia.com/mig-3g.40gb": [big.uuid]})]),
        Pod("team-b", "infer-1", [Container("server", {"nvidia.com/mig-1g.10gb": [small.uuid]})]),
    ]
    with exporting(system, kubelet.socket) as exporter:
        samples = exporter.scrape()
    series = _one(samples, FB_USED, pod="infer-0")
    assert set(series.labels) == DEVICE_LABELS | POD_LABELS | MIG_LABELS
    assert (series.labels["UUID"], series.labels["gpu"], series.labels["GPU_I_PROFILE"], series.labels["GPU_I_ID"]) == (
        gpu0.uuid, "0", "3g.40gb", "2")  # UUID is the parent GPU's, as DCGM's
    assert series.value == 25_000
    assert _one(samples, FB_USED, pod="infer-1").labels["GPU_I_PROFILE"] == "1g.10gb"
    # No GPU_UTIL for MIG instances (DCGM has none either); activity where NVML gives it per process.
    assert _series(samples, GPU_UTIL, UUID=gpu0.uuid) == []
    assert _series(samples, ENGINE_ACTIVE, pod="infer-0") == []
    assert _one(samples, ENGINE_ACTIVE, pod="infer-1").value == pytest.approx(0.45)
    # A GPU in MIG mode is reported by its instances only: 4 on GPU 0, 7 on GPU 1, none for the parents.
    assert len([s for s in samples[FB_USED] if "GPU_I_ID" in s.labels]) == 11
    idle_instance = _one(samples, FB_USED, UUID=gpu0.uuid, GPU_I_ID="3")
    assert "pod" not in idle_instance.labels and idle_instance.value == 12


def test_shared_gpus_give_each_pod_the_devices_figures(kubelet: Kubelet) -> None:
    system = machines.l4_mps()
    gpu = system.gpus[0]
    gpu.processes = [FakeProcess(1, 4_000), FakeProcess(2, 6_000)]
    kubelet.pods = [
        # Time-sliced replicas of one GPU (the device plugin's `::N` ids) held by two pods,
        Pod("team-a", "a", [Container("main", {"nvidia.com/gpu.shared": [f"{gpu.uuid}::0"]})]),
        Pod("team-b", "b", [Container("main", {"nvidia.com/gpu.shared": [f"{gpu.uuid}::3"]})]),
        # and one pod whose two containers share the other GPU: one series, its first container.
        Pod("team-c", "c", [Container("first", {"nvidia.com/gpu": [system.gpus[1].uuid]}),
                            Container("second", {"nvidia.com/gpu": [system.gpus[1].uuid]})]),
    ]
    with exporting(system, kubelet.socket) as exporter:
        samples = exporter.scrape()
    shared = _series(samples, FB_USED, UUID=gpu.uuid)
    assert sorted((s.labels["pod"], s.value) for s in shared) == [("a", 10_000), ("b", 10_000)]
    assert [s.labels["container"] for s in _series(samples, FB_USED, UUID=system.gpus[1].uuid)] == ["first"]


def test_gke_device_ids_find_gpus_and_mig_instances(kubelet: Kubelet) -> None:
    system = machines.hgx_a100_80gb_mig_mixed()
    kubelet.pods = [
        Pod("ns", "whole", [Container("c", {"nvidia.com/gpu": ["nvidia4"]})]),
        Pod("ns", "slice", [Container("c", {"nvidia.com/gpu": ["nvidia1/gi8/vgpu0"]})]),
    ]
    with exporting(system, kubelet.socket) as exporter:
        samples = exporter.scrape()
    assert _one(samples, FB_USED, pod="whole").labels["UUID"] == system.gpus[4].uuid
    assert _one(samples, FB_USED, pod="slice").labels["GPU_I_ID"] == "8"


@pytest.mark.parametrize(("device_id", "key"), [
    ("GPU-abc", "GPU-abc"), ("GPU-abc::12", "GPU-abc"), ("MIG-def", "MIG-def"), ("nvidia3", "nvidia3"),
    ("nvidia3/gi5", "nvidia3/gi5"), ("nvidia3/gi5/vgpu1", "nvidia3/gi5"), ("nvidia3/vgpu2", "nvidia3"),
])
def test_device_id_keys(device_id: str, key: str) -> None:
    assert device_id_key(device_id) == key


def test_dra_devices_are_mapped_through_the_nodes_resource_slices(
    kubelet: Kubelet, node_api: NodeApi, core_v1: Any
) -> None:
    system = machines.hgx_a100_80gb_mig_mixed()
    mig = system.gpus[1].mig[0]
    node_api.slices = [
        {"spec": {"driver": "gpu.nvidia.com", "nodeName": NODE, "pool": {"name": NODE}, "devices": [
            {"name": "gpu-4", "attributes": {"uuid": {"string": system.gpus[4].uuid}, "type": {"string": "gpu"}}},
            {"name": "gpu-1-mig-7", "attributes": {"gpu.nvidia.com/uuid": {"string": mig.uuid}}},
        ]}},
        {"spec": {"driver": "gpu.nvidia.com", "nodeName": "other", "pool": {"name": "other"}, "devices": [
            {"name": "gpu-5", "attributes": {"uuid": {"string": system.gpus[5].uuid}}}]}},
    ]
    kubelet.pods = [Pod("team-d", "dra-0", [Container("main", claims=[
        Claim("gpus", "team-d", "gpu.nvidia.com", NODE, "gpu-4"),
        Claim("gpus", "team-d", "gpu.nvidia.com", NODE, "gpu-1-mig-7"),
        Claim("gpus", "team-d", "gpu.nvidia.com", NODE, "gpu-9"),  # no such device: unmapped
    ])])]
    dra = DraDevices(slices_from_api(core_v1.api_client, NODE))
    with exporting(system, kubelet.socket, dra) as exporter:
        samples = exporter.scrape()
        exporter.scrape()
    whole = _one(samples, FB_USED, pod="dra-0", UUID=system.gpus[4].uuid)
    assert {k: v for k, v in whole.labels.items() if k.startswith("dra_")} == {
        "dra_claim_name": "gpus", "dra_claim_namespace": "team-d", "dra_driver_name": "gpu.nvidia.com",
        "dra_pool_name": NODE, "dra_device_name": "gpu-4",
    }
    assert _one(samples, FB_USED, pod="dra-0", GPU_I_ID="7").labels["dra_device_name"] == "gpu-1-mig-7"
    assert len(_series(samples, FB_USED, pod="dra-0")) == 2
    # The slices were listed for this node only, once: an unknown device waits for the refresh interval.
    lists = [r for r in node_api.requests if r.path.endswith("/resourceslices")]
    assert len(lists) == 1 and lists[0].query["fieldSelector"] == f"spec.nodeName={NODE}"


def test_without_the_dra_api_claims_stay_unmapped_with_one_warning(
    kubelet: Kubelet, node_api: NodeApi, core_v1: Any, caplog: pytest.LogCaptureFixture
) -> None:
    system = machines.l4_mps()
    kubelet.pods = [Pod("ns", "dra", [Container("c", claims=[Claim("x", "ns", "gpu.nvidia.com", NODE, "gpu-0")])])]
    moment = [0.0]
    dra = DraDevices(slices_from_api(core_v1.api_client, NODE), refresh=60.0, clock=lambda: moment[0])
    with caplog.at_level(logging.WARNING, logger="kgwe.agent"), exporting(system, kubelet.socket, dra) as exporter:
        samples = exporter.scrape()
        exporter.scrape()
        moment[0] = 61.0
        exporter.scrape()
    assert "pod" not in str(samples[FB_USED])
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "ResourceSlices failed" in caplog.records[0].message
    assert len([r for r in node_api.requests if r.path.endswith("/resourceslices")]) == 2


def test_without_the_socket_series_have_no_pod_labels_one_warning_then_recover(
    caplog: pytest.LogCaptureFixture,
) -> None:
    system = machines.l4_mps()
    with short_dir() as folder:
        path = folder / "kubelet.sock"
        with caplog.at_level(logging.INFO, logger="kgwe.agent"), exporting(system, path) as exporter:
            for _ in range(3):
                samples = exporter.scrape()
                assert len(samples[FB_USED]) == 2 and all(set(s.labels) == DEVICE_LABELS for s in samples[FB_USED])
                assert _value(samples, POD_RESOURCES_UP) == 0 and _value(samples, NVML_UP) == 1
            pods = [Pod("ns", "p", [Container("c", {"nvidia.com/gpu": [system.gpus[0].uuid]})])]
            with serving(Kubelet(path, pods)):
                samples = exporter.scrape()
            assert _one(samples, FB_USED, UUID=system.gpus[0].uuid).labels["pod"] == "p"
            assert _value(samples, POD_RESOURCES_UP) == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "no kubelet PodResources socket" in warnings[0].getMessage()
    assert any("read again" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)


def test_without_a_socket_configured_there_are_no_pod_labels() -> None:
    system = machines.l4_mps()
    with exporting(system, None) as exporter:
        samples = exporter.scrape()
    assert len(samples[FB_USED]) == 2 and _value(samples, POD_RESOURCES_UP) == 0


def test_processes_that_end_between_scrapes_leave_the_pods_memory(kubelet: Kubelet) -> None:
    system = machines.l4_mps()
    gpu = system.gpus[0]
    gpu.processes = [FakeProcess(1, 4_000, [(_now_us(), 50)]), FakeProcess(2, 6_000, [(_now_us(), 30)])]
    kubelet.pods = [Pod("ns", "p", [Container("c", {"nvidia.com/gpu": [gpu.uuid]})])]
    with exporting(system, kubelet.socket) as exporter:
        first = exporter.scrape()
        gpu.processes.pop(0)
        second = exporter.scrape()
        gpu.processes.clear()
        third = exporter.scrape()
    assert [_one(s, FB_USED, pod="p").value for s in (first, second, third)] == [10_000, 6_000, 0]
    assert [_one(s, ENGINE_ACTIVE, pod="p").value for s in (first, second, third)] == [
        pytest.approx(0.8), pytest.approx(0.3), 0.0]


def test_process_memory_not_available_falls_back_to_the_devices(kubelet: Kubelet) -> None:
    system = machines.l4_mps()
    gpu = system.gpus[0]
    gpu.processes = [FakeProcess(1, None), FakeProcess(2, 1_000)]
    kubelet.pods = [Pod("ns", "p", [Container("c", {"nvidia.com/gpu": [gpu.uuid]})])]
    with exporting(system, kubelet.socket) as exporter:
        samples = exporter.scrape()
    assert _one(samples, FB_USED, pod="p").value == 512 + 1_000


def test_process_utilisation_not_supported_leaves_gpu_util_only(kubelet: Kubelet) -> None:
    system = machines.l4_mps()
    gpu = system.gpus[0]
    gpu.process_utilization = False
    gpu.utilization_gpu = 42
    gpu.processes = [FakeProcess(1, 1_000, [(_now_us(), 90)])]
    kubelet.pods = [Pod("ns", "p", [Container("c", {"nvidia.com/gpu": [gpu.uuid]})])]
    with exporting(system, kubelet.socket) as exporter:
        samples = exporter.scrape()
    assert _series(samples, ENGINE_ACTIVE, UUID=gpu.uuid) == []
    assert _one(samples, GPU_UTIL, pod="p").value == 42
    assert len(samples[ENGINE_ACTIVE]) == 1  # the other L4 still has it


def test_activity_is_capped_at_one(kubelet: Kubelet) -> None:
    system = machines.l4_mps()
    gpu = system.gpus[0]
    gpu.processes = [FakeProcess(n, 100, [(_now_us(), 70)]) for n in range(3)]
    with exporting(system, kubelet.socket) as exporter:
        assert _one(exporter.scrape(), ENGINE_ACTIVE, UUID=gpu.uuid).value == 1.0


def test_a_lost_gpu_drops_out_and_nvml_gone_leaves_the_agents_own_series(kubelet: Kubelet) -> None:
    system = machines.dgx_h100_failing_gpu(index=6)
    with exporting(system, kubelet.socket) as exporter:
        samples = exporter.scrape()
        assert len(samples[FB_USED]) == 7
        exporter.collector.reader.close()
        samples = exporter.scrape()
    assert FB_USED not in samples and _value(samples, NVML_UP) == 0


def test_kgwe_agent_serves_metrics_while_it_publishes(kubeconfig: Path, node_api: NodeApi, kubelet: Kubelet) -> None:
    system = machines.l4_mps()
    system.gpus[1].processes = [FakeProcess(10, 2_000)]
    kubelet.pods = [Pod("ns", "p", [Container("c", {"nvidia.com/gpu": [system.gpus[1].uuid]})])]
    port = free_port()
    stop = threading.Event()
    status: list[int] = []
    argv = ["--node-name", NODE, "--kubeconfig", str(kubeconfig), "--metrics-port", str(port),
            "--metrics-address", "127.0.0.1", "--pod-resources-socket", str(kubelet.socket)]
    with installed(system):
        agent = threading.Thread(target=lambda: status.append(run(argv, stop)), daemon=True)
        agent.start()
        try:
            deadline = time.monotonic() + WAIT_SECONDS
            while True:
                try:
                    samples = Exporter(f"http://127.0.0.1:{port}/metrics", system, None).scrape()  # type: ignore[arg-type]
                    break
                except OSError:
                    assert time.monotonic() < deadline, "the agent never served /metrics"
                    time.sleep(0.05)
            # /metrics serves before the first publish cycle begins: a stop set before that cycle ran (a busy
            # machine may run the agent's thread late) would end the agent without publishing at all.
            eventually(lambda: bool(node_api.patches), what="the topology published")
        finally:
            stop.set()
            agent.join(timeout=WAIT_SECONDS)
    assert status == [0]
    assert _one(samples, FB_USED, pod="p").value == 2_000
    assert node_api.patches, "it published the topology too"
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)


def test_print_metrics_prints_the_series_once(capsys: pytest.CaptureFixture[str], kubelet: Kubelet) -> None:
    with installed(machines.l4_mps()):
        assert run(["--print-metrics", "--node-name", NODE, "--pod-resources-socket", str(kubelet.socket)]) == 0
    families = {f.name: f for f in text_string_to_metric_families(capsys.readouterr().out)}
    assert len(families[FB_USED].samples) == 2 and families[FB_USED].samples[0].labels["Hostname"] == NODE


def test_a_busy_metrics_port_is_a_clear_error(
    kubeconfig: Path, node_api: NodeApi, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with installed(machines.l4_mps()):
            status = run(["--node-name", NODE, "--kubeconfig", str(kubeconfig), "--metrics-port", str(port),
                          "--metrics-address", "127.0.0.1", "--pod-resources-socket", ""], threading.Event())
    assert status == 1 and f"cannot serve /metrics on 127.0.0.1:{port}" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--metrics-port", "70000"], ["--metrics-port", "x"],
                                  ["--utilisation-window", "0"], ["--pod-resources-timeout", "-1"]])
def test_bad_usage_flags_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run([*argv, "--dry-run"])
    assert exit_info.value.code == 2


def test_help_names_the_usage_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        run(["--help"])
    out = capsys.readouterr().out
    for flag in ("--metrics-port", "--metrics-address", "--metrics-cert-file", "--metrics-key-file",
                 "--pod-resources-socket", "--pod-resources-timeout",
                 "--utilisation-window", "--print-metrics"):
        assert flag in out


def test_without_a_process_list_a_held_gpu_reports_the_devices_memory(kubelet: Kubelet) -> None:
    system = machines.l4_mps()
    gpu = system.gpus[0]
    gpu.processes = [FakeProcess(1, 3_000, [(_now_us(), 50)])]
    gpu.failures["nvmlDeviceGetComputeRunningProcesses_v3"] = 3  # NOT_SUPPORTED
    kubelet.pods = [Pod("ns", "p", [Container("c", {"nvidia.com/gpu": [gpu.uuid]})])]
    with exporting(system, kubelet.socket) as exporter:
        samples = exporter.scrape()
    assert _one(samples, FB_USED, pod="p").value == 512 + 3_000
    assert _series(samples, ENGINE_ACTIVE, pod="p") == []
