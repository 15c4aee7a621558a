"""Which workload a pod belongs to, so that replicas pool their history (SPEC section 11).

The owner is read from the pod when the cluster model has it: the labels the controllers write (JobSet's
replicated job, the training operator's replica type, LeaderWorkerSet, KubeRay's group, a Job's name) and
its controller ownerReference (a ReplicaSet with a `pod-template-hash` is its Deployment's; a Job named
`<cronjob>-<minutes>` is its CronJob's). A pod that is gone (a finished Job's) is known only by the name
Prometheus kept; its owner is then read from the names the controllers generate, and marked so
(`source: name`). A pod with no owner is a workload of its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.vocabulary.objects import PodView

# The alphabet of Kubernetes' generated suffixes and pod-template-hash (k8s.io/apimachinery rand.String).
_SAFE = "[bcdfghjklmnpqrstvwxz2456789]"
_CRONJOB_JOB = re.compile(r"^(?P<name>.+)-\d{8,}$")
# Pod names as the controllers make them, most specific first.
_NAME_RULES: tuple[tuple[str, re.Pattern[str], str | None], ...] = (
    ("CronJob", re.compile(rf"^(?P<name>.+)-\d{{8,}}-{_SAFE}{{5}}$"), None),
    ("JobSet", re.compile(rf"^(?P<name>.+)-\d+-\d+-{_SAFE}{{5}}$"), None),
    ("Job", re.compile(rf"^(?P<name>.+)-\d+-{_SAFE}{{5}}$"), None),  # indexed Job
    ("Deployment", re.compile(rf"^(?P<name>.+)-{_SAFE}{{6,10}}-{_SAFE}{{5}}$"), None),
    ("PyTorchJob", re.compile(r"^(?P<name>.+)-(?P<part>master|worker|launcher|chief|ps|evaluator)-\d+$"), "part"),
    ("StatefulSet", re.compile(r"^(?P<name>.+)-\d+$"), None),
    ("Job", re.compile(rf"^(?P<name>.+)-{_SAFE}{{5}}$"), None),
)
_LABEL_RULES: tuple[tuple[str, str, str | None], ...] = (
    # (kind, label with the workload's name, label with the template's part)
    ("JobSet", "jobset.sigs.k8s.io/jobset-name", "jobset.sigs.k8s.io/replicatedjob-name"),
    ("PyTorchJob", "training.kubeflow.org/job-name", "training.kubeflow.org/replica-type"),
    ("LeaderWorkerSet", "leaderworkerset.sigs.k8s.io/name", None),
    ("RayCluster", "ray.io/cluster", "ray.io/group"),
)


@dataclass(frozen=True, order=True)
class WorkloadRef:
    """A workload: its kind, namespace and name, and the template (`part`) when it has several."""

    namespace: str
    kind: str
    name: str
    part: str = ""
    source: str = "pod"  # pod: read from the pod's owner and labels; name: inferred from the pod's name

    @property
    def key(self) -> str:
        """`Kind/namespace/name[/part]`."""
        base = f"{self.kind}/{self.namespace}/{self.name}"
        return f"{base}/{self.part}" if self.part else base

    def matches(self, text: str) -> bool:
        """True when `text` names this workload: `name`, `Kind/name`, or its key (case of the kind ignored)."""
        if text in (self.name, self.key, f"{self.name}/{self.part}"):
            return True
        kind, _, rest = text.partition("/")
        return kind.lower() == self.kind.lower() and rest in (self.name, f"{self.name}/{self.part}")


def workload_of(namespace: str, name: str, pod: Mapping[str, Any] | None) -> WorkloadRef:
    """The workload of the pod `namespace/name`, from the pod object when there is one, else its name."""
    if pod is not None:
        found = _from_pod(namespace, name, PodView(pod))
        if found is not None:
            return found
        return WorkloadRef(namespace, "Pod", name)
    return _from_name(namespace, name)


def _from_pod(namespace: str, name: str, view: PodView) -> WorkloadRef | None:
    labels = view.labels
    for kind, name_label, part_label in _LABEL_RULES:
        owner = labels.get(name_label)
        if owner:
            part = labels.get(part_label, "") if part_label else ""
            if kind == "LeaderWorkerSet":
                part = "leader" if labels.get("leaderworkerset.sigs.k8s.io/worker-index", "0") == "0" else "worker"
            return WorkloadRef(namespace, kind, owner, part.lower() if kind == "PyTorchJob" else part)
    owner_ref = view.controller_owner
    if owner_ref is None:
        return None
    kind, owner = str(owner_ref.get("kind") or ""), str(owner_ref.get("name") or "")
    if not kind or not owner:
        return None
    template_hash = labels.get("pod-template-hash")
    if kind == "ReplicaSet" and template_hash and owner.endswith(f"-{template_hash}"):
        return WorkloadRef(namespace, "Deployment", owner[: -len(template_hash) - 1])
    if kind == "Job":
        cron = _CRONJOB_JOB.match(owner)
        if cron is not None:
            return WorkloadRef(namespace, "CronJob", cron.group("name"))
    return WorkloadRef(namespace, kind, owner)


def _from_name(namespace: str, name: str) -> WorkloadRef:
    for kind, pattern, part_group in _NAME_RULES:
        match = pattern.match(name)
        if match is not None:
            part = match.group(part_group) if part_group else ""
            return WorkloadRef(namespace, kind, match.group("name"), part, source="name")
    return WorkloadRef(namespace, "Pod", name, source="name")


# Kinds whose pods are one workload whatever the template (their pods' owner is the workload or its
# ReplicaSet/Job), and kinds whose templates are parts of it, named as the pods' labels name them.
_WHOLE_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"})
MAX_NAME_CHARS = 253


def template_workload(kind: str, namespace: str, name: str, pointer: tuple[str, ...],
                      workload: Mapping[str, Any]) -> WorkloadRef | None:
    """The workload the pods of the template at `pointer` (JSON-pointer tokens from the workload's root) will
    pool their history under, as `workload_of` finds it for those pods; None when it cannot be known at the
    workload's admission (a generated name, a RayJob's cluster, a kind added in the configuration)."""
    if not name or len(name) > MAX_NAME_CHARS:
        return None
    if kind in _WHOLE_KINDS:
        return WorkloadRef(namespace, kind, name)
    if kind == "JobSet" and len(pointer) > 2 and pointer[:2] == ("spec", "replicatedJobs"):
        jobs = (workload.get("spec") or {}).get("replicatedJobs")
        index = int(pointer[2]) if pointer[2].isdigit() else -1
        if isinstance(jobs, list) and 0 <= index < len(jobs) and isinstance(jobs[index], dict):
            part = jobs[index].get("name")
            return WorkloadRef(namespace, kind, name, part) if isinstance(part, str) and part else None
        return None
    if kind == "PyTorchJob" and len(pointer) > 2 and pointer[:2] == ("spec", "pytorchReplicaSpecs"):
        return WorkloadRef(namespace, kind, name, pointer[2].lower())
    if kind == "LeaderWorkerSet" and len(pointer) > 2:
        part = {"leaderTemplate": "leader", "workerTemplate": "worker"}.get(pointer[2])
        return WorkloadRef(namespace, kind, name, part) if part else None
    if kind == "RayCluster" and len(pointer) > 1:
        if pointer[1] == "headGroupSpec":
            return WorkloadRef(namespace, kind, name, "headgroup")
        groups = (workload.get("spec") or {}).get("workerGroupSpecs")
        index = int(pointer[2]) if len(pointer) > 2 and pointer[2].isdigit() else -1
        if pointer[1] == "workerGroupSpecs" and isinstance(groups, list) and 0 <= index < len(groups):
            group = groups[index].get("groupName") if isinstance(groups[index], dict) else None
            return WorkloadRef(namespace, kind, name, group) if isinstance(group, str) and group else None
    return None
