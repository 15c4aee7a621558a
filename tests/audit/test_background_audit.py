"""The background audit on a cluster directory with planted violations, and its reports (OpenReports by default,
wgpolicyk8s PolicyReports with audit.reportFormat)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_dirs import EXAMPLE_CONFIG, ROOT, copy_example_cluster, gpu_pod, plant, set_quota_limit
from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY
from waiting import eventually

from webhook.assembly import build_runtime
from webhook.audit import Auditor, Finding, KubeReportWriter, MemoryReportWriter, audit_cluster
from webhook.config import Audit, load_config
from webhook.runtime import Runtime


@pytest.fixture
def planted(tmp_path: Path) -> Runtime:
    cluster = copy_example_cluster(tmp_path / "cluster")
    plant(
        cluster, "violations.yaml",
        # A Deny policy (kgwe.admission.privileged) that arrived after the pod did.
        gpu_pod("root-trainer", "ml-research", gpus=2, node="dgx-h100-02", privileged=True,
                annotations={"kgwe.io/tenant": "ml-research"}),
        # Asked for A100, yet runs on an H100 node (admitted while KGWE was down, or the node was relabelled).
        gpu_pod("misplaced", "ml-research", gpus=1, node="dgx-h100-02",
                annotations={"kgwe.io/accelerator": "nvidia-a100-80gb"}),
        # Asks for a type the cluster no longer has.
        gpu_pod("orphan", "team-a", gpus=1, phase="Pending", annotations={"kgwe.io/accelerator": "nvidia-v100-16gb"}),
        # Clean: right type, memory limit set.
        gpu_pod("fine", "ml-research", gpus=1, node="dgx-h100-02",
                annotations={"kgwe.io/accelerator": "nvidia-h100-80gb"}),
    )
    # team-a runs 4 H100 GPUs; its limit is lowered to 2.
    set_quota_limit(cluster, "team-a", "nvidia-h100-80gb", 2)
    return build_runtime(load_config(EXAMPLE_CONFIG), cluster)


def _only(findings: list[Finding], **match: Any) -> Finding:
    found = [f for f in findings if all(getattr(f, k) == v for k, v in match.items())]
    assert len(found) == 1, (match, findings)
    return found[0]


def test_audit_cluster_finds_every_planted_violation(planted: Runtime) -> None:
    findings = audit_cluster(planted)

    policy = _only(findings, pod="root-trainer", policy="kgwe.admission.privileged")
    assert (policy.category, policy.namespace) == ("policy", "ml-research")
    assert (policy.severity, policy.result) == ("high", "fail")
    assert "privileged" in policy.message

    wrong = _only(findings, pod="misplaced", category="placement")
    assert (wrong.rule, wrong.severity) == ("wrong-type", "high")
    assert "dgx-h100-02 (nvidia-h100-80gb)" in wrong.message and "nvidia-a100-80gb" in wrong.message

    refused = _only(findings, pod="orphan", category="placement")
    assert refused.rule == "refused"
    assert "nvidia-v100-16gb" in refused.message and "not scheduled yet" in refused.message

    quota = _only(findings, category="quota")
    assert (quota.namespace, quota.pod, quota.tenant, quota.quota) == ("", "", "team-a", "team-a")
    assert "4 of 2 GPUs" in quota.message

    assert not [f for f in findings if f.pod == "fine" and f.result == "fail"]
    assert not [f for f in findings if f.pod == "batch-done"]  # finished pods are not judged


def test_the_example_cluster_fails_only_on_the_workload_it_shows_refused(tmp_path: Path) -> None:
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), copy_example_cluster(tmp_path / "cluster"))
    findings = audit_cluster(runtime)
    # examples/cluster/workloads.yaml: chat-h200 asks for H200s, which no node has. Its pods that wait
    # (pods-waiting.yaml: for capacity, quota, a clique) are admitted pods, not findings.
    [refused] = [f for f in findings if f.result != "warn"]
    assert (refused.kind, refused.namespace, refused.pod, refused.policy) == (
        "Deployment", "team-a", "chat-h200", "kgwe-workload-admission")
    assert refused.message.startswith("spec.template: nvidia-h200-141gb: no such GPUs")
    assert {f.policy for f in findings if f.result == "warn"} == {"kgwe.admission.memory_limit"}  # a Warn policy


def _gauge(category: str, namespace: str) -> float | None:
    return REGISTRY.get_sample_value("kgwe_audit_violations", {"category": category, "namespace": namespace})


def test_auditor_writes_reports_and_metrics(planted: Runtime) -> None:
    writer = MemoryReportWriter()
    clock = iter(range(1_800_000_000, 1_800_001_000, 60))
    auditor = Auditor(planted, writer, pods_per_tick=2, clock=lambda: float(next(clock)))
    pods = len(planted.store.snapshot().pods)
    ticks = [auditor.tick() for _ in range(-(-pods // 2))]
    assert all(t.audited == 2 for t in ticks)  # bounded work: never more than pods_per_tick
    assert ticks[-1].completed_pass and not ticks[0].completed_pass

    reports = writer.reports
    research = reports[("Report", "ml-research", "kgwe-audit")]
    assert research["apiVersion"] == "openreports.io/v1alpha1" and research["source"] == "kgwe"
    assert research["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "kgwe"
    assert research["summary"] == {"pass": 0, "fail": 2, "warn": 0, "error": 0, "skip": 0}
    privileged = next(r for r in research["results"] if r["policy"] == "kgwe.admission.privileged")
    assert privileged["resources"] == [{"apiVersion": "v1", "kind": "Pod", "namespace": "ml-research",
                                        "name": "root-trainer"}]
    assert (privileged["result"], privileged["severity"], privileged["source"]) == ("fail", "high", "kgwe")
    assert privileged["timestamp"]["nanos"] == 0 and privileged["timestamp"]["seconds"] >= 1_800_000_000

    cluster = reports[("ClusterReport", "", "kgwe-audit")]
    assert "namespace" not in cluster["metadata"]
    [quota] = cluster["results"]
    assert quota["resources"] == [{"apiVersion": "kgwe.io/v1alpha1", "kind": "TenantQuota", "name": "team-a"}]
    assert quota["properties"] == {"tenant": "team-a"}

    assert _gauge("quota", "") == 1
    assert _gauge("placement", "ml-research") == 1
    assert _gauge("policy", "ml-research") == 1
    assert _gauge("placement", "team-a") == 1


def test_auditor_writes_only_changes_and_clears_fixed_violations(planted: Runtime) -> None:
    writer = MemoryReportWriter()
    auditor = Auditor(planted, writer, pods_per_tick=100)
    auditor.tick()
    first = len(writer.writes)
    assert auditor.tick().written == 0  # nothing changed: nothing rewritten
    assert len(writer.writes) == first

    store = planted.store
    store.min_rebuild_interval = 0
    for pod in list(store.objects("Pod")):
        if pod["metadata"]["name"] in ("root-trainer", "misplaced"):
            store.delete(pod)
    result = auditor.tick()
    assert result.written == 1
    research = writer.reports[("Report", "ml-research", "kgwe-audit")]
    assert research["results"] == [] and research["summary"]["fail"] == 0
    assert _gauge("policy", "ml-research") is None and _gauge("placement", "ml-research") is None
    # The emptied report is written once, then left alone.
    assert auditor.tick().written == 0


def test_round_robin_covers_every_pod_one_slice_at_a_time(planted: Runtime) -> None:
    auditor = Auditor(planted, MemoryReportWriter(), pods_per_tick=1)
    pods = len(planted.store.snapshot().pods)
    for _ in range(pods):
        assert auditor.tick().audited == 1
    assert {f.pod for f in auditor.findings if f.pod} >= {"root-trainer", "misplaced", "orphan"}


class FakeCustomObjects:
    """The four calls of kubernetes.client.CustomObjectsApi the writer makes, over a dict, with real ApiExceptions."""

    def __init__(self, installed: bool = True) -> None:
        self.installed = installed
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.groups: set[tuple[str, str]] = set()
        self.version = 0

    def _store(self, plural: str, namespace: str, body: dict[str, Any], replace: bool) -> dict[str, Any]:
        if not self.installed:
            raise ApiException(status=404, reason="Not Found")
        key = (plural, namespace, body["metadata"]["name"])
        if key in self.objects and not replace:
            raise ApiException(status=409, reason="AlreadyExists")
        if replace and body["metadata"].get("resourceVersion") != self.objects[key]["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.objects[key] = stored
        return stored

    def create_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                        body: dict[str, Any]) -> dict[str, Any]:
        self.groups.add((group, version))
        return self._store(plural, namespace, body, replace=False)

    def create_cluster_custom_object(self, group: str, version: str, plural: str, body: dict[str, Any]) -> Any:
        self.groups.add((group, version))
        return self._store(plural, "", body, replace=False)

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str) -> Any:
        return self.objects[(plural, namespace, name)]

    def get_cluster_custom_object(self, group: str, version: str, plural: str, name: str) -> Any:
        return self.objects[(plural, "", name)]

    def replace_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str, name: str,
                                         body: dict[str, Any]) -> Any:
        return self._store(plural, namespace, body, replace=True)

    def replace_cluster_custom_object(self, group: str, version: str, plural: str, name: str, body: Any) -> Any:
        return self._store(plural, "", body, replace=True)


def test_kube_writer_creates_then_replaces(planted: Runtime) -> None:
    api = FakeCustomObjects()
    auditor = Auditor(planted, KubeReportWriter(api), pods_per_tick=100)
    auditor.tick()
    assert ("reports", "ml-research", "kgwe-audit") in api.objects
    assert ("clusterreports", "", "kgwe-audit") in api.objects
    assert api.groups == {("openreports.io", "v1alpha1")}
    version = api.objects[("reports", "ml-research", "kgwe-audit")]["metadata"]["resourceVersion"]
    planted.store.min_rebuild_interval = 0
    planted.store.upsert(gpu_pod("root-2", "ml-research", node="dgx-h100-02", privileged=True))
    auditor.tick()
    replaced = api.objects[("reports", "ml-research", "kgwe-audit")]
    assert replaced["metadata"]["resourceVersion"] != version
    assert any(r["resources"][0]["name"] == "root-2" for r in replaced["results"])


def test_kube_writer_without_the_crds_skips_reports(planted: Runtime) -> None:
    api = FakeCustomObjects(installed=False)
    auditor = Auditor(planted, KubeReportWriter(api), pods_per_tick=100)
    result = auditor.tick()
    assert result.findings > 0 and api.objects == {}


def test_only_the_leader_audits(planted: Runtime) -> None:
    leader = [True]
    writer = MemoryReportWriter()
    auditor = Auditor(planted, writer, pods_per_tick=100, is_leader=lambda: leader[0])
    assert auditor.tick().findings > 0
    assert _gauge("quota", "") == 1
    leader[0] = False
    writes = len(writer.writes)
    assert auditor.tick() == auditor.tick()
    assert auditor.findings == [] and len(writer.writes) == writes
    assert _gauge("quota", "") is None


def test_auditor_runs_as_a_background_task_with_rego_and_cel_policies(tmp_path: Path) -> None:
    cluster = copy_example_cluster(tmp_path / "cluster")
    plant(cluster, "root.yaml", gpu_pod("root-trainer", "ml-research", gpus=2, node="dgx-h100-02", privileged=True))
    # A CEL GPUPolicy tightened after train-llm-0 (4 GPUs) was admitted.
    cap = yaml.safe_load((ROOT / "examples" / "policies" / "max-gpus-per-pod.yaml").read_text())
    cap["spec"]["params"]["maxGpus"] = 2
    plant(cluster, "cap.yaml", cap)
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), cluster)
    writer = MemoryReportWriter()
    auditor = Auditor(runtime, writer, pods_per_tick=2, interval_seconds=0.01)

    def done() -> bool:
        pods = {(f.pod, f.policy) for f in auditor.findings}
        return {("root-trainer", "kgwe.admission.privileged"), ("train-llm-0", "max-gpus-per-pod")} <= pods

    # A tick keeps its findings before it writes its reports: waiting for the report itself (not for any write,
    # which an earlier tick may have made) leaves nothing to a stop that a busy machine may not finish in time.
    team_a = ("Report", "team-a", "kgwe-audit")
    auditor.task.start()
    try:
        eventually(lambda: done() and team_a in writer.reports, what="both findings and team-a's report")
    finally:
        auditor.task.stop()
    assert done()
    capped = next(f for f in auditor.findings if f.policy == "max-gpus-per-pod")
    assert (capped.severity, capped.message) == ("high", "the pod asks for 4 GPUs; at most 2 are allowed per pod")
    assert team_a in writer.reports


def test_the_wgpolicyk8s_format_is_kept_as_an_option(planted: Runtime) -> None:
    planted.config = planted.config.model_copy(update={"audit": Audit(reportFormat="wgpolicyk8s")})
    api = FakeCustomObjects()
    Auditor(planted, KubeReportWriter(api), pods_per_tick=100).tick()
    assert api.groups == {("wgpolicyk8s.io", "v1alpha2")}
    research = api.objects[("policyreports", "ml-research", "kgwe-audit")]
    assert research["kind"] == "PolicyReport" and "source" not in research
    assert research["summary"]["fail"] == 2
    assert ("clusterpolicyreports", "", "kgwe-audit") in api.objects


def test_workloads_are_judged_a_slice_per_tick_and_reported(tmp_path: Path) -> None:
    cluster = copy_example_cluster(tmp_path / "cluster")
    # No node of the example has a V100: a pod of this Deployment would be refused, so is its CREATE.
    plant(cluster, "old.yaml", deployment("old-gpus", "team-a", "nvidia-v100-16gb"))
    runtime = build_runtime(load_config(EXAMPLE_CONFIG), cluster)
    workloads = len(runtime.store.snapshot().workloads)
    writer = MemoryReportWriter()
    auditor = Auditor(runtime, writer, pods_per_tick=1)
    ticks = [auditor.tick() for _ in range(workloads)]
    assert all(t.workloads == 1 for t in ticks)  # bounded like pods: pods_per_tick workloads per tick
    # Beside the example's own refused workload (chat-h200, examples/cluster/workloads.yaml).
    assert sorted(f.pod for f in auditor.findings if f.kind) == ["chat-h200", "old-gpus"]
    [finding] = [f for f in auditor.findings if f.kind and f.pod == "old-gpus"]
    assert (finding.kind, finding.namespace, finding.pod) == ("Deployment", "team-a", "old-gpus")
    report = writer.reports[("Report", "team-a", "kgwe-audit")]
    [result] = [r for r in report["results"] if r["policy"] == "kgwe-workload-admission"
                and r["resources"][0]["name"] == "old-gpus"]
    assert result["resources"] == [{"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "team-a",
                                    "name": "old-gpus"}]
    assert result["message"].startswith("spec.template: ") and "nvidia-v100-16gb" in result["message"]

    # The workload is gone: its finding goes at the next tick, and the namespace's report says so; the other
    # refused workload's stays.
    runtime.store.min_rebuild_interval = 0
    [old] = [d for d in runtime.store.objects("Deployment") if d["metadata"]["name"] == "old-gpus"]
    runtime.store.delete(old)
    auditor.tick()
    assert [f.pod for f in auditor.findings if f.kind] == ["chat-h200"]
    report = writer.reports[("Report", "team-a", "kgwe-audit")]
    assert [r["resources"][0]["name"] for r in report["results"] if r["policy"] == "kgwe-workload-admission"] == [
        "chat-h200"]


def deployment(name: str, namespace: str, accelerator: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": {"app": name}, "annotations": {"kgwe.io/accelerator": accelerator}},
            "spec": {"containers": [{"name": "c", "image": "cuda", "resources": {
                "limits": {"nvidia.com/gpu": "1", "memory": "1Gi"}}}]},
        }},
    }
