"""Workload admission (SPEC section 7): every pod template judged as a pod made from it.

`WorkloadKind` is the kind handler the assembly registers for the kinds of the kind table (kinds.py) and
the configuration. A workload is split into its pod templates; each becomes the pod a controller would
create from it (template_pods.py: template metadata and spec, the request's namespace, the workload's
intent annotations where the template does not set the key) and runs through the core's pod flow, flagged
as a template so no quota is reserved. The mutated pod is written back as the template (so the patch is the
pod's patch under the template's path), and refusals carry the template's path in front of the pod's
message. Pods themselves are judged for whoever asked for them (`resolved`, registered by hook.py).

Gangs are the exception to "the template is rewritten as the pod": the clique affinity and the
scheduling gate are per pod, added at pod CREATE by the gang feature, so a template gets only the
gang label and the `kgwe.io/gang` and `kgwe.io/gang-size` annotations.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from policies.gpu_demand import pod_gpu_demand
from policies.vocabulary.objects import ObjectView
from webhook.admission.core import AdmissionService
from webhook.admission.outcome import Outcome
from webhook.admission.request import AdmissionRequest
from webhook.admission.seams import AdmissionSeams, PendingVerdict, PodFlow
from webhook.cluster.device_classes import mapped_resources
from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.identity_key import load_key
from webhook.intent import A_GANG, OUT_ACCELERATOR_TYPE, annotations_of, gang_size_problem
from webhook.mutation.patch import diff
from webhook.mutation.pipeline import copy_json
from webhook.placement.context import PlacementPlan
from webhook.runtime import Runtime
from webhook.workload_kinds import KindSpec, KindTable, Template, TemplatePath, WorkloadShapeError, extract_templates
from webhook.workload_owners import template_workload
from webhook.workloads.identity import Identity, Requester, Signer, as_caller, with_requester
from webhook.workloads.quota_warnings import replicas_over_quota
from webhook.workloads.replicas import CountError, WorkloadGang, gang_of, gang_request, pods_per_template
from webhook.workloads.template_pods import (
    as_template,
    gang_mismatch,
    in_kgwe_scope,
    intent_of,
    put,
    take_gang,
    template_pod,
)

log = logging.getLogger("kgwe.workloads")

POD_GVK = {"group": "", "version": "v1", "kind": "Pod"}
POD_GVR = {"group": "", "version": "v1", "resource": "pods"}


class SizedGangPlanner(Protocol):
    """Whether a gang of `size` pods of `gpus_per_pod` GPUs could ever find a room, written into `plan` with a
    refusal when not: the gang wing's planner (webhook/gangs/plan.py `plan_sized_gang`), handed in by the
    assembly, so this wing imports no other."""

    def __call__(
        self, plan: PlacementPlan, pod: dict[str, Any], candidates: list[str], gang: str, size: int,
        gpus_per_pod: int, model: ClusterModel,
    ) -> bool: ...


class WorkloadKind:
    """The handler of every kind of the kind table, and the requester model its pods are judged by."""

    def __init__(self, runtime: Runtime, plan_gang: SizedGangPlanner) -> None:
        self.runtime = runtime
        self.plan_gang = plan_gang
        self._identity: tuple[tuple[Path | None, tuple[str, ...]], Identity] | None = None
        self._identity_of: Config | None = None  # the configuration `_identity` was last checked against
        self._kinds: tuple[int, KindTable] | None = None

    # -- collaborators, rebuilt when the configuration changes ---------------------------------
    @property
    def identity(self) -> Identity:
        config = self.runtime.config
        if self._identity is not None and self._identity_of is config:
            return self._identity[1]  # a configuration is never changed in place: a new one is a new object
        settings = config.workloads
        key = (settings.identity_key_file, tuple(settings.controller_identities))
        if self._identity is None or self._identity[0] != key:
            previous = self._identity[1].signer if self._identity and self._identity[0][0] == key[0] else None
            signer = previous or Signer(load_key(settings.identity_key_file))
            self._identity = (key, Identity(signer, key[1]))
        self._identity_of = config
        return self._identity[1]

    @identity.setter
    def identity(self, value: Identity) -> None:
        config = self.runtime.config
        settings = config.workloads
        self._identity = ((settings.identity_key_file, tuple(settings.controller_identities)), value)
        self._identity_of = config

    @property
    def kinds(self) -> KindTable:
        config = self.runtime.config
        if self._kinds is None or self._kinds[0] != id(config):
            extra = [
                KindSpec(k.group, k.kind, k.resource, (k.version,), tuple(TemplatePath.parse(p) for p in k.templates))
                for k in config.workloads.kinds
            ]
            self._kinds = (id(config), KindTable.build(extra))
        return self._kinds[1]

    def workload_kind(self, request: AdmissionRequest) -> KindSpec | None:
        if request.sub_resource:
            return None
        config = self.runtime.config
        if not config.workloads.enabled:
            return None
        # `self.kinds` read inline while it is this configuration's: every request of any kind asks this.
        kept = self._kinds
        table = kept[1] if kept is not None and kept[0] == id(config) else self.kinds
        kind = request.kind
        return table.lookup(kind.get("group", ""), kind.get("kind", ""))

    # -- the kind handler (webhook/admission/seams.py KindHandler) ---------------------------------
    def judges(self, request: AdmissionRequest) -> bool:
        return self.workload_kind(request) is not None

    def mutate(self, request: AdmissionRequest, deadline: float | None, pods: PodFlow) -> Outcome:
        spec = self.workload_kind(request)
        assert spec is not None
        return self._mutate_workload(request, spec, deadline, pods)

    def prepare_verdict(
        self, request: AdmissionRequest, deadline: float | None, pods: PodFlow
    ) -> Outcome | PendingVerdict:
        """A workload is judged template by template (each as its pod, gates inline: templates reserve no
        quota)."""
        spec = self.workload_kind(request)
        assert spec is not None
        return self._validate_workload(request, spec, deadline, pods)

    def resolved(self, request: AdmissionRequest) -> AdmissionRequest:
        """A pod CREATE judged for whoever asked for it (the workload's creator for controller-made pods)."""
        if request.template or not request.is_pod or request.operation != "CREATE" or request.object is None:
            return request
        owner = request.pod.controller_owner  # read once: the view walks the owner references each time
        admitted = self._admits(owner)
        signed = self.identity.signed_for_pod(request, request.object, admitted)
        # Its template was judged at the owner's admission, rightsizing included (docs/usage.md).
        made_from_template = request.made_from_template or (admitted and owner is not None)
        if signed is None:  # `for_pod`'s requester is the caller
            return as_caller(request, made_from_template)
        return with_requester(request, signed, made_from_template)

    def _owner_admitted(self, request: AdmissionRequest) -> bool:
        """Whether the object's controller owner, if it has one, is of a kind whose pod templates KGWE admits
        (a kind of the kind table, or a Pod: a LeaderWorkerSet's worker StatefulSet is owned by its leader).

        Only then did the templates a controller copies into the object pass workload admission, which
        signs them for whoever wrote them; an operator for a kind KGWE does not know (a TFJob, a RayService)
        copies whatever its author wrote, a `kgwe.io/requested-by` taken from another workload included."""
        return self._admits(request.pod.controller_owner)

    def _admits(self, owner: Mapping[str, Any] | None) -> bool:
        """`_owner_admitted` of a request whose controller owner is `owner`."""
        if owner is None:
            return True
        api_version, kind = str(owner.get("apiVersion") or ""), str(owner.get("kind") or "")
        if api_version == "v1" and kind == "Pod":
            return True
        return self.kinds.by_api_version(api_version, kind) is not None

    def _workload_in_scope(self, request: AdmissionRequest) -> bool:
        return (
            request.object is not None
            and request.operation in ("CREATE", "UPDATE")
            and request.namespace not in self.runtime.config.excluded_namespaces
            and not self._made_for_an_owner(request)
        )

    def _made_for_an_owner(self, request: AdmissionRequest) -> bool:
        """A workload a controller writes for the workload that owns it (a Deployment's ReplicaSet, a
        CronJob's or JobSet's Job, a LeaderWorkerSet's StatefulSet) passes unchanged: its template was
        written and judged at the owner's admission, its pods are admitted on their own, and a template
        changed under the owner's controller makes it churn (the Deployment controller finds its
        ReplicaSet by comparing templates, and would make new ones without end)."""
        if request.pod.controller_owner is None or not self._owner_admitted(request):
            return False  # an owner KGWE does not admit (a RayService's RayCluster): its templates are judged here
        return self.identity.is_controller(request.user)

    # -- mutate -------------------------------------------------------------------------------
    def _mutate_workload(
        self, request: AdmissionRequest, spec: KindSpec, deadline: float | None, pods: PodFlow
    ) -> Outcome:
        if not self._workload_in_scope(request):
            return Outcome(object=request.object)
        assert request.object is not None
        try:
            plan = self._plan(request, spec)
        except WorkloadShapeError as exc:
            # /validate refuses it with the same words; mutation leaves it alone.
            return Outcome(object=request.object, warnings=[str(exc)])
        workload = copy_json(request.object)
        outcome = Outcome(object=workload)
        mutated_pods: list[dict[str, Any]] = []
        for item in plan.items:
            answer = pods.mutate_pod(item.request, deadline)
            outcome.warnings.extend(f"{item.template.path}: {w}" for w in answer.warnings)
            outcome.audit_annotations.update(answer.audit_annotations)
            mutated = answer.object if answer.object is not None else item.request.object
            assert mutated is not None
            mutated_pods.append(mutated)
            put(workload, item.template.pointer, as_template(item.template.value, mutated, item.gang))
        pairs = [(item.count, item.request) for item in plan.items]
        outcome.warnings.extend(replicas_over_quota(pairs, mutated_pods, self.runtime.store.snapshot()))
        outcome.patch = diff(request.object, workload)
        return outcome

    # -- validate -----------------------------------------------------------------------------
    def _validate_workload(
        self, request: AdmissionRequest, spec: KindSpec, deadline: float | None, pods: PodFlow
    ) -> Outcome:
        if not self._workload_in_scope(request):
            return Outcome(object=request.object)
        try:
            plan = self._plan(request, spec)
        except WorkloadShapeError as exc:
            self.runtime.record_refusal("invalid")
            denial = Outcome.deny(str(exc), code=422, reason="Invalid")
            denial.object = request.object
            return denial
        refusals: list[str] = list(plan.problems)
        warnings: list[str] = []
        audit: dict[str, str] = {}
        codes = {422} if plan.problems else set()
        for item in plan.items:
            answer = pods.validate_pod(item.request, deadline)
            warnings.extend(f"{item.template.path}: {w}" for w in answer.warnings)
            audit.update(answer.audit_annotations)
            gang_problem = gang_mismatch(item.template.value, item.gang) or self._gang_refusal(item)
            if gang_problem:
                refusals.append(f"{item.template.path}: {gang_problem}")
                codes.add(403)
            if not answer.allowed:
                refusals.append(f"{item.template.path}: {answer.message}")
                codes.add(answer.code)
        if not refusals:
            return Outcome(warnings=warnings, audit_annotations=audit, object=request.object)
        if self.runtime.config.mode == "audit":
            message = "; ".join(refusals)
            warnings.insert(0, f"KGWE audit mode: would deny: {message}")
            audit["would-deny"] = message[:1024]
            return Outcome(warnings=warnings, audit_annotations=audit, object=request.object)
        # 422 only when every refusal is about the object itself (bad intent, bad shape), as for pods.
        code = 422 if codes == {422} else 403
        denial = Outcome.deny("; ".join(refusals), code=code, reason="Invalid" if code == 422 else "Forbidden")
        denial.warnings = warnings
        denial.audit_annotations = audit
        denial.object = request.object
        return denial

    def _gang_refusal(self, item: TemplateItem) -> str | None:
        """What every pod of this template would be refused for as a member of its sized gang (SPEC section 8:
        more than 1,024 members, or more GPUs than any NVLink room could ever hold), so the workload is
        refused at apply like its pods would be (SPEC section 7). The template itself is judged without its
        gang, which is placed per pod; its pods' own admission keeps the last word."""
        gang = item.gang
        pod = item.request.object
        if gang is None or not gang.size or pod is None:
            return None
        demand = pod_gpu_demand(pod)
        if not demand.asks_gpu:
            return None
        problem = gang_size_problem(gang.size)
        if problem is not None:
            return problem
        model = self.runtime.store.snapshot()
        types = [t for t in annotations_of(pod).get(OUT_ACCELERATOR_TYPE, "").split(",") if t in model.types]
        if not types:
            return None  # not placed by KGWE's mutating webhook: the template's own verdict refuses it
        scratch = PlacementPlan(gpu_pod=True)
        if self.plan_gang(scratch, pod, types, gang.name, gang.size, demand.whole_gpus, model):
            return None
        return "; ".join(scratch.refusals)

    # -- the templates as pods ------------------------------------------------------------------
    def _plan(self, request: AdmissionRequest, spec: KindSpec) -> WorkloadPlan:
        assert request.object is not None
        workload = request.object
        limit = self.runtime.config.workloads.max_templates
        templates = extract_templates(workload, spec, limit)
        old_templates: dict[tuple[str, ...], dict[str, Any]] = {}
        if request.operation == "UPDATE" and request.old_object is not None:
            try:
                old_templates = {t.pointer: t.value for t in extract_templates(request.old_object, spec, limit)}
            except WorkloadShapeError:
                old_templates = {}
        inherited = intent_of(workload)
        gang_value = gang_request(workload, spec, inherited)
        if gang_value is not None:
            # A workload gang is the gang of all its GPU pods, not a gang name for each template.
            inherited.pop(A_GANG, None)
        pods = [template_pod(t, inherited, request.namespace) for t in templates]
        admitted_owner = self._owner_admitted(request)
        mapped = mapped_resources(self.runtime.store.snapshot().device_classes)
        plan = WorkloadPlan()
        try:
            plan.counts = pods_per_template(workload, spec, templates)
        except CountError as exc:
            plan.counts = [None for _ in templates]
            plan.problems.append(str(exc))
        gang: WorkloadGang | None = None
        if gang_value is not None and not plan.problems:
            gpu = [pod_gpu_demand(pod).asks_gpu for pod in pods]
            try:
                gang = gang_of(workload, spec, plan.counts, gpu, gang_value)
            except ValueError as exc:
                plan.problems.append(str(exc))
        for template, pod, count in zip(templates, pods, plan.counts, strict=True):
            own_gang = take_gang(pod, template.path)
            member = gang if gang is not None and pod_gpu_demand(pod).asks_gpu else None
            if member is None and own_gang is not None:
                member = own_gang
            if in_kgwe_scope(pod, template.value, mapped):
                requester = self.identity.for_template(
                    request, template.value, old_templates.get(template.pointer), admitted_owner
                )
            else:
                # Like the webhook configurations' matchConditions: a template with no GPU and no kgwe.io/ key
                # is none of KGWE's business, and gets no attribution written into it.
                requester = Requester(request.user, None, "", False)
            pod_request = self._pod_request(request, pod, requester)
            # The workload its pods will pool their usage under: what rightsizing and policies read for it.
            ref = template_workload(request.kind.get("kind", ""), request.namespace,
                                    ObjectView(workload).name or request.name, template.pointer, workload)
            if ref is not None:
                pod_request = replace(pod_request, workload=ref.key)
            plan.items.append(TemplateItem(template, pod_request, member, count))
        return plan

    def _pod_request(self, request: AdmissionRequest, pod: dict[str, Any], requester: Requester) -> AdmissionRequest:
        """The CREATE of a pod made from the template, as the pod webhooks would see it, for `requester`."""
        raw = dict(request.raw)
        raw.update(
            kind=POD_GVK, resource=POD_GVR, requestKind=POD_GVK, requestResource=POD_GVR, subResource=None,
            name="", operation="CREATE", object=pod, oldObject=None,
        )
        pod_request = replace(
            request, kind=dict(POD_GVK), resource=dict(POD_GVR), operation="CREATE", name="", object=pod,
            old_object=None, raw=raw, sub_resource="", template=True,
        )
        return with_requester(pod_request, requester)


@dataclass
class TemplateItem:
    """One template and the pod CREATE it is judged as."""

    template: Template
    request: AdmissionRequest  # the pod request: object = the template's pod, for the template's requester
    gang: WorkloadGang | None  # the gang its pods join (written as label + annotations only)
    count: int | None  # pods made from it at once; None when unknown


@dataclass
class WorkloadPlan:
    items: list[TemplateItem] = field(default_factory=list)
    counts: list[int | None] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # about the workload as a whole (422)


def workloads_of(admission: AdmissionService) -> WorkloadKind:
    """The workload handler the assembly registered on `admission` (its kind table and requester model)."""
    return registered_handler(admission.seams)


def registered_handler(seams: AdmissionSeams) -> WorkloadKind:
    """The workload handler among the kinds of `seams` (webhook/assembly.py register_wings put it there)."""
    found = next((h for h in seams.kinds if isinstance(h, WorkloadKind)), None)
    if found is None:
        raise LookupError("no workload kind handler is registered (webhook/assembly.py register_wings)")
    return found
