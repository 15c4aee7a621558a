"""Where each workload kind keeps its pod templates (SPEC section 7), as data, and bounded extraction.

A template path is written as in the SPEC: dot-separated keys, `[*]` for every item of a list and a
`*` segment for every value of a map, e.g. `spec.replicatedJobs[*].template.spec.template` or
`spec.pytorchReplicaSpecs.*.template`. Extraction walks the workload the API server sent, which the
creator controls entirely: every list and map a wildcard expands is capped, and a shape that is not
what the path says (a list where a map belongs, a template that is not an object) is refused with a
message naming the path, never guessed at.

The table is vocabulary below the wings (issue 34): the workloads wing admits by it, `kgwe review` and the
audit name a workload's kind and templates by it without importing the wing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from webhook.template_path import TemplatePath

# Templates one workload may carry: JobSet and PyTorchJob have a handful, nothing real has dozens.
MAX_TEMPLATES = 64


class WorkloadShapeError(ValueError):
    """The workload is not shaped as its kind's template paths say: refused, naming the path."""


@dataclass(frozen=True)
class KindSpec:
    """One workload kind: its API group, kind, resource (plural) and template paths."""

    group: str
    kind: str
    resource: str
    versions: tuple[str, ...]
    paths: tuple[TemplatePath, ...]
    # How the gang size of a `kgwe.io/gang` on the workload is counted (see `gangs.py`); "" = no gangs.
    gang_rule: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.versions[0]}" if self.group else self.versions[0]


@dataclass(frozen=True)
class Template:
    """One pod template found in a workload."""

    pointer: tuple[str, ...]  # JSON-pointer tokens from the workload's root
    value: dict[str, Any]

    @property
    def path(self) -> str:
        """The concrete path for messages: `spec.replicatedJobs[1].template.spec.template`."""
        out = ""
        for token in self.pointer:
            out += f"[{token}]" if token.isdigit() else (f".{token}" if out else token)
        return out

    @property
    def json_pointer(self) -> str:
        return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in self.pointer)


def _spec(
    group: str, kind: str, resource: str, versions: Iterable[str], paths: Iterable[str], gang: str = ""
) -> KindSpec:
    return KindSpec(group, kind, resource, tuple(versions), tuple(TemplatePath.parse(p) for p in paths), gang)


RAY_PATHS = ("headGroupSpec.template", "workerGroupSpecs[*].template")

BUILTIN_KINDS: tuple[KindSpec, ...] = (
    _spec("apps", "Deployment", "deployments", ["v1"], ["spec.template"]),
    _spec("apps", "StatefulSet", "statefulsets", ["v1"], ["spec.template"]),
    _spec("apps", "ReplicaSet", "replicasets", ["v1"], ["spec.template"]),
    _spec("apps", "DaemonSet", "daemonsets", ["v1"], ["spec.template"]),
    _spec("batch", "Job", "jobs", ["v1"], ["spec.template"], gang="indexed-job"),
    _spec("batch", "CronJob", "cronjobs", ["v1"], ["spec.jobTemplate.spec.template"]),
    _spec("jobset.x-k8s.io", "JobSet", "jobsets", ["v1alpha2"],
          ["spec.replicatedJobs[*].template.spec.template"], gang="jobset"),
    _spec("leaderworkerset.x-k8s.io", "LeaderWorkerSet", "leaderworkersets", ["v1"],
          ["spec.leaderWorkerTemplate.leaderTemplate", "spec.leaderWorkerTemplate.workerTemplate"], gang="lws"),
    _spec("kubeflow.org", "PyTorchJob", "pytorchjobs", ["v1"], ["spec.pytorchReplicaSpecs.*.template"],
          gang="pytorchjob"),
    # The submitter (K8sJobMode) is a Job KubeRay makes from `submitterPodTemplate`: a template like the others.
    _spec("ray.io", "RayJob", "rayjobs", ["v1"],
          [*(f"spec.rayClusterSpec.{p}" for p in RAY_PATHS), "spec.submitterPodTemplate"], gang="rayjob"),
    _spec("ray.io", "RayCluster", "rayclusters", ["v1"], [f"spec.{p}" for p in RAY_PATHS], gang="raycluster"),
)


@dataclass
class KindTable:
    """Workload kinds by (group, kind): the built-in ones and those the configuration adds."""

    kinds: dict[tuple[str, str], KindSpec] = field(default_factory=dict)

    @classmethod
    def build(cls, extra: Iterable[KindSpec] = ()) -> KindTable:
        table = cls({(k.group, k.kind): k for k in BUILTIN_KINDS})
        for spec in extra:
            # An admin's entry for a built-in kind replaces it (a CRD at a newer version, say).
            table.kinds[(spec.group, spec.kind)] = spec
        return table

    def lookup(self, group: str, kind: str) -> KindSpec | None:
        return self.kinds.get((group, kind))

    def by_api_version(self, api_version: str, kind: str) -> KindSpec | None:
        group = api_version.rpartition("/")[0] if "/" in api_version else ""
        return self.lookup(group, kind)


def extract_templates(workload: dict[str, Any], spec: KindSpec, limit: int = MAX_TEMPLATES) -> list[Template]:
    """Every pod template of `workload`, in path order; WorkloadShapeError for hostile shapes.

    A path that ends early (a field left out: a LeaderWorkerSet without a leader template) yields
    nothing; a value of the wrong type on the way is an error, since the API server validated the
    object against its schema and only a hostile or broken object gets here that way.
    """
    found: list[Template] = []
    for path in spec.paths:
        _walk(workload, path, 0, (), found, limit)
    return found


def _walk(
    value: Any, path: TemplatePath, index: int, pointer: tuple[str, ...], found: list[Template], limit: int
) -> None:
    if index == len(path.segments):
        where = Template(pointer, {}).path
        if not isinstance(value, dict):
            raise WorkloadShapeError(f"{where}: a pod template must be an object")
        if len(found) >= limit:
            raise WorkloadShapeError(f"more than {limit} pod templates in one workload (at {where})")
        found.append(Template(pointer, value))
        return
    if not isinstance(value, dict):
        raise WorkloadShapeError(f"{Template(pointer, {}).path or 'the object'}: expected an object")
    segment = path.segments[index]
    if segment.key == "*":
        children = [(str(k), v) for k, v in value.items()]
    elif segment.key in value:
        children = [(segment.key, value[segment.key])]
    else:
        return
    if len(children) > limit:
        raise WorkloadShapeError(f"{Template(pointer, {}).path}: more than {limit} entries")
    for key, child in children:
        if child is None:
            continue
        here = (*pointer, key)
        if not segment.each_item:
            _walk(child, path, index + 1, here, found, limit)
            continue
        if not isinstance(child, list):
            raise WorkloadShapeError(f"{Template(here, {}).path}: expected a list")
        if len(child) > limit:
            raise WorkloadShapeError(f"{Template(here, {}).path}: more than {limit} items")
        for position, item in enumerate(child):
            _walk(item, path, index + 1, (*here, str(position)), found, limit)
