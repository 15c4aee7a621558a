"""The PodResources client against a fake kubelet serving gRPC on a unix socket: what it reads, what it skips,
its bounds, and how it fails (no socket, an error status, a stall past its deadline, a kubelet restart)."""

from __future__ import annotations

import time

import grpc
import pytest
from kubelet_podresources import WIRE, Claim, Container, Kubelet, Pod, response, serving, short_dir
from patience import WAIT_SECONDS

from agent import podresources
from agent.podresources import ClaimDevice, PodResourcesClient, PodResourcesUnavailable, allocations

GPU_A, GPU_B = "GPU-3b1ef5a4-0000-4000-8000-00000000000a", "GPU-3b1ef5a4-0000-4000-8000-00000000000b"
MIG_A = "MIG-1f0e9a4c-0000-4000-8000-0000000000a1"


def _client(kubelet: Kubelet, timeout: float = 5.0) -> PodResourcesClient:
    return PodResourcesClient(str(kubelet.socket), timeout=timeout, min_interval=0.0)


def test_gpu_and_mig_devices_are_read_per_container(kubelet: Kubelet) -> None:
    kubelet.pods = [
        Pod("team-a", "train-0", [
            Container("main", {"nvidia.com/gpu": [GPU_A, GPU_B], "example.com/nic": ["nic-0"]}),
            Container("sidecar", {"example.com/nic": ["nic-1"]}),
        ]),
        Pod("team-b", "infer-0", [Container("server", {"nvidia.com/mig-1g.10gb": [MIG_A]})]),
        Pod("kube-system", "no-devices", [Container("c")]),
    ]
    client = _client(kubelet)
    try:
        found = client.read()
    finally:
        client.close()
    assert [(a.namespace, a.pod, a.container, a.device_ids, a.claims) for a in found] == [
        ("team-a", "train-0", "main", [GPU_A, GPU_B], []),
        ("team-b", "infer-0", "server", [MIG_A], []),
    ]


def test_dra_claims_are_read_with_driver_pool_and_device(kubelet: Kubelet) -> None:
    kubelet.pods = [Pod("team-a", "dra-0", [Container("main", claims=[
        Claim("gpu-claim", "team-a", "gpu.nvidia.com", "node-1", "gpu-0"),
        Claim("gpu-claim", "team-a", "gpu.nvidia.com", "node-1", "gpu-1"),
    ])])]
    found = _client(kubelet).read()
    assert found[0].claims == [
        ClaimDevice("gpu-claim", "team-a", "gpu.nvidia.com", "node-1", "gpu-0"),
        ClaimDevice("gpu-claim", "team-a", "gpu.nvidia.com", "node-1", "gpu-1"),
    ]


@pytest.mark.parametrize(("name", "gpu"), [
    ("nvidia.com/gpu", True), ("nvidia.com/gpu.shared", True), ("nvidia.com/mig-3g.40gb", True),
    ("nvidia.com/mig-1g.10gb.shared", True), ("nvidia.com/gpus", False), ("amd.com/gpu", False),
    ("example.com/nvidia.com/gpu", False),
])
def test_which_resources_are_gpus(name: str, gpu: bool) -> None:
    assert podresources.is_gpu_resource(name) is gpu


def test_answers_are_read_within_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(podresources, "MAX_PODS", 3)
    monkeypatch.setattr(podresources, "MAX_CONTAINERS", 2)
    monkeypatch.setattr(podresources, "MAX_DEVICE_IDS", 4)
    monkeypatch.setattr(podresources, "MAX_CLAIM_DEVICES", 1)
    many = [f"GPU-{n}" for n in range(10)]
    pods = [Pod("ns", f"p{n}", [Container(f"c{m}", {"nvidia.com/gpu": many},
                                          [Claim("x", "ns", "d", "p", "dev-0"), Claim("x", "ns", "d", "p", "dev-1")])
                                for m in range(5)]) for n in range(6)]
    # Through the wire: the agent's own messages parse the fake kubelet's fuller ones.
    wire = response(pods).SerializeToString()
    found = allocations(podresources.MESSAGES["ListPodResourcesResponse"].FromString(wire))
    assert len(found) == 3 * 2
    assert all(len(a.device_ids) == 4 and len(a.claims) == 1 for a in found)


def test_long_names_are_cut() -> None:
    long = "x" * 1000
    wire = response([Pod(long, long, [Container(long, {"nvidia.com/gpu": [long]})])]).SerializeToString()
    found = allocations(podresources.MESSAGES["ListPodResourcesResponse"].FromString(wire))[0]
    assert {len(found.namespace), len(found.pod), len(found.container), len(found.device_ids[0])} == {253}


def test_the_fake_kubelets_messages_carry_fields_the_agent_skips() -> None:
    answer = response([Pod("ns", "p", [Container("c", {"nvidia.com/gpu": [GPU_A]})])])
    assert list(answer.pod_resources[0].cpu_ids) == [0, 1]
    parsed = podresources.MESSAGES["ListPodResourcesResponse"].FromString(answer.SerializeToString())
    assert parsed.pod_resources[0].containers[0].devices[0].device_ids == [GPU_A]
    assert WIRE["ListPodResourcesResponse"].FromString(parsed.SerializeToString()) == answer  # skipped, not lost


def test_a_missing_socket_says_where() -> None:
    with short_dir() as folder:
        client = PodResourcesClient(str(folder / "kubelet.sock"), min_interval=0.0)
        with pytest.raises(PodResourcesUnavailable, match=r"no kubelet PodResources socket at .*kubelet\.sock"):
            client.read()


def test_an_error_status_is_unavailable(kubelet: Kubelet) -> None:
    kubelet.fail = grpc.StatusCode.RESOURCE_EXHAUSTED  # the kubelet's rate limit answers so
    with pytest.raises(PodResourcesUnavailable, match="RESOURCE_EXHAUSTED"):
        _client(kubelet).read()


def test_a_stalled_kubelet_hits_the_deadline(kubelet: Kubelet) -> None:
    kubelet.stall = 60.0  # ends when the kubelet stops serving (the end of the test)
    client = _client(kubelet, timeout=0.3)
    start = time.monotonic()
    with pytest.raises(PodResourcesUnavailable, match="DEADLINE_EXCEEDED"):
        client.read()
    assert time.monotonic() - start < 30  # the deadline (0.3 s), not the stall: wide for a busy machine


def test_a_socket_that_is_no_server_is_unavailable() -> None:
    with short_dir() as folder:
        path = folder / "kubelet.sock"
        path.write_text("")  # a stale file where the socket was
        with pytest.raises(PodResourcesUnavailable, match="UNAVAILABLE"):
            PodResourcesClient(str(path), min_interval=0.0, timeout=WAIT_SECONDS).read()


def test_a_restarted_kubelet_is_read_again_at_once() -> None:
    with short_dir() as folder:
        socket = folder / "kubelet.sock"
        pods = [Pod("ns", "p", [Container("c", {"nvidia.com/gpu": [GPU_A]})])]
        client = PodResourcesClient(str(socket), min_interval=0.0, timeout=WAIT_SECONDS)
        with serving(Kubelet(socket, pods)):
            assert len(client.read()) == 1
            first = client._channel
        with pytest.raises(PodResourcesUnavailable):
            client.read()
        with serving(Kubelet(socket, pods)):
            # Read at the first try, on a new channel: the old one's reconnect backoff (a channel in it fails
            # a call at once with UNAVAILABLE) is not left over. Judged by the channel, not by a clock.
            assert len(client.read()) == 1
            assert client._channel is not None and client._channel is not first
        client.close()


def test_reads_within_the_minimum_interval_share_one_call(kubelet: Kubelet) -> None:
    kubelet.pods = [Pod("ns", "p", [Container("c", {"nvidia.com/gpu": [GPU_A]})])]
    moment = [100.0]
    client = PodResourcesClient(str(kubelet.socket), min_interval=1.0, clock=lambda: moment[0])
    client.read()
    client.read()
    assert kubelet.calls == 1
    moment[0] += 1.0
    client.read()
    assert kubelet.calls == 2
    # A failure is remembered for the interval too: a burst of scrapes asks a failing kubelet once.
    kubelet.fail = grpc.StatusCode.INTERNAL
    moment[0] += 1.0
    for _ in range(3):
        with pytest.raises(PodResourcesUnavailable):
            client.read()
    assert kubelet.calls == 3
