"""How many pods each template of a workload makes, and the gang a `kgwe.io/gang` on the workload asks for.

Counts come from the fields the controllers read, with their defaults (docs/workloads.md has the
table). They feed two things: the total GPU demand warned about against the tenant's limit, and
`kgwe.io/gang-size` of a workload gang (SPEC section 8: the gang is all the workload's GPU pods).
A count the creator wrote out of range is not guessed at: it makes the workload's gang refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.workload_kinds import KindSpec, Template

# More pods than any real workload has; beyond it a count is a typo or an attack.
MAX_COUNT = 1_000_000
GANG_TRUE = "true"


class CountError(ValueError):
    """A replica field that is not a count in range."""


def _count(obj: Any, field: str, default: int | None) -> int | None:
    value = obj.get(field) if isinstance(obj, dict) else None
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise CountError(f"{field}: {value!r} is not a count between 0 and {MAX_COUNT}")
    return value


def _at(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _job_pods(job_spec: Any) -> int:
    """Pods of one Job running at once: parallelism (default 1), at most completions when set."""
    parallelism = _count(job_spec, "parallelism", 1) or 0
    completions = _count(job_spec, "completions", None)
    return min(parallelism, completions) if completions is not None else parallelism


def _item(workload: dict[str, Any], template: Template, depth: int) -> Any:
    """The object `depth` tokens into the template's pointer (the replicated job, replica spec, group)."""
    obj: Any = workload
    for token in template.pointer[:depth]:
        obj = obj[int(token)] if isinstance(obj, list) else obj[token]
    return obj


def _single(field: str, default: int | None) -> Callable[[dict[str, Any], Template], int | None]:
    return lambda workload, _t: _count(workload.get("spec"), field, default)


def _job(workload: dict[str, Any], _t: Template) -> int | None:
    return _job_pods(workload.get("spec"))


def _cronjob(workload: dict[str, Any], _t: Template) -> int | None:
    return _job_pods(_at(workload, "spec", "jobTemplate", "spec"))


def _jobset(workload: dict[str, Any], template: Template) -> int | None:
    replicated = _item(workload, template, 3)  # spec / replicatedJobs / i
    return (_count(replicated, "replicas", 1) or 0) * _job_pods(_at(replicated, "template", "spec"))


def _lws(workload: dict[str, Any], template: Template) -> int | None:
    lwt = _at(workload, "spec", "leaderWorkerTemplate")
    groups = _count(workload.get("spec"), "replicas", 1) or 0
    size = _count(lwt, "size", 1) or 0
    if template.pointer[-1] == "leaderTemplate":
        return groups
    # Without a leader template the leader is made from the worker template too.
    has_leader = isinstance(_at(lwt, "leaderTemplate"), dict)
    return groups * (max(size - 1, 0) if has_leader else size)


def _pytorchjob(workload: dict[str, Any], template: Template) -> int | None:
    return _count(_item(workload, template, 3), "replicas", 1)  # spec / pytorchReplicaSpecs / type


def _ray(prefix: int) -> Callable[[dict[str, Any], Template], int | None]:
    def count(workload: dict[str, Any], template: Template) -> int | None:
        if template.pointer[-1] == "submitterPodTemplate":
            return 1  # a RayJob's submitter: the one pod of the Job KubeRay makes from it
        group_name = template.pointer[prefix]
        if group_name == "headGroupSpec":
            return 1
        group = _item(workload, template, prefix + 2)  # workerGroupSpecs / i
        replicas = _count(group, "replicas", None)
        if replicas is None:
            replicas = _count(group, "minReplicas", 1) or 0
        return replicas * (_count(group, "numOfHosts", 1) or 0)

    return count


_COUNTERS: dict[tuple[str, str], Callable[[dict[str, Any], Template], int | None]] = {
    ("apps", "Deployment"): _single("replicas", 1),
    ("apps", "StatefulSet"): _single("replicas", 1),
    ("apps", "ReplicaSet"): _single("replicas", 1),
    ("apps", "DaemonSet"): lambda _w, _t: None,  # one per matching node: not known from the object
    ("batch", "Job"): _job,
    ("batch", "CronJob"): _cronjob,
    ("jobset.x-k8s.io", "JobSet"): _jobset,
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): _lws,
    ("kubeflow.org", "PyTorchJob"): _pytorchjob,
    ("ray.io", "RayJob"): _ray(2),  # spec / rayClusterSpec / headGroupSpec|workerGroupSpecs
    ("ray.io", "RayCluster"): _ray(1),
}


def pods_per_template(workload: dict[str, Any], spec: KindSpec, templates: list[Template]) -> list[int | None]:
    """Pods each template makes at once (None: unknown, e.g. a DaemonSet or an admin-added kind).

    Raises CountError for a count field out of range.
    """
    counter = _COUNTERS.get((spec.group, spec.kind))
    if counter is None:
        return [None for _ in templates]
    return [counter(workload, template) for template in templates]


@dataclass(frozen=True)
class WorkloadGang:
    name: str
    size: int


def gang_of(
    workload: dict[str, Any], spec: KindSpec, counts: list[int | None], gpu: list[bool], value: str
) -> WorkloadGang:
    """The gang `kgwe.io/gang: value` on the workload makes: every GPU pod of it. ValueError says why not."""
    name = (_at(workload, "metadata", "name") or "") if value.strip().lower() == GANG_TRUE else value.strip()
    if not name:
        raise ValueError("kgwe.io/gang: true names the gang after the workload, which has no name yet; give a name")
    if len(name) > 63 or not all(c.isalnum() or c in "-_." for c in name) or not name[0].isalnum():
        raise ValueError(f"kgwe.io/gang: {name!r} must be a valid label value (63 characters, alphanumeric, -_.)")
    if spec.gang_rule == "indexed-job" and _at(workload, "spec", "completionMode") != "Indexed":
        raise ValueError("kgwe.io/gang on a Job needs completionMode: Indexed (its pods are one distributed job)")
    size = sum(c or 0 for c, g in zip(counts, gpu, strict=True) if g)
    if size < 1:
        raise ValueError("kgwe.io/gang: the workload makes no GPU pod to gang")
    return WorkloadGang(name, size)


def gang_request(workload: dict[str, Any], spec: KindSpec, intent_keys: Mapping[str, str]) -> str | None:
    """The workload's own `kgwe.io/gang` value when its kind makes workload gangs, else None."""
    if not spec.gang_rule:
        return None
    value = intent_keys.get("kgwe.io/gang", "")
    return value if value.strip() else None
