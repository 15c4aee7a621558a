"""Gather: everything admission knows about one pod, from the decoded request and the cluster snapshot.

Decode (webhook/admission/request.py) -> **gather facts** (here: scope, intent, GPU demand, tenant, the
policies' decision and checks, the placement plan) -> mutate (mutate.py) or validate (validate.py) ->
respond (response.py). `FactGathering` is the base the two flows share; `AdmissionService` (core.py)
is both, over the ports (ports.py) and the wings' seams (seams.py).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from policies.api import Violation
from policies.runtime.outcomes import PolicyEngineError
from policies.vocabulary.objects import PodView
from webhook.admission.facts import Facts
from webhook.admission.outcome import Outcome
from webhook.admission.policy_glue import ReplicaAnswer
from webhook.admission.ports import AdmissionPorts
from webhook.admission.request import AdmissionRequest
from webhook.admission.seams import AdmissionSeams
from webhook.placement.memo import PlanMemoEntry, PodReading, copy_plan, planned_with_entry, read_pod
from webhook.placement.plan import Decision

log = logging.getLogger("kgwe.admission")


class DeadlineExceeded(TimeoutError):
    pass


class FactGathering:
    """What the mutating and the validating flow share: the ports, the seams, the scope and the facts."""

    def __init__(self, runtime: AdmissionPorts, seams: AdmissionSeams | None = None) -> None:
        self.runtime = runtime
        self.seams = seams if seams is not None else AdmissionSeams()

    def _in_scope(self, request: AdmissionRequest) -> bool:
        if not request.is_pod or request.object is None:
            return False
        if request.operation not in ("CREATE", "UPDATE"):
            return False
        if request.sub_resource and request.operation != "UPDATE":
            return False  # a pod's judged subresources are only ever updated
        return request.namespace not in self.runtime.config.excluded_namespaces

    def gather(
        self, request: AdmissionRequest, pod: dict[str, Any], deadline: float | None, *, with_checks: bool = False,
        reading: PodReading | None = None,
    ) -> Facts:
        """Everything about one pod; with `with_checks` also the policies' violations, in the same engine call.
        `reading`: `read_pod` of the request's own pod, when the caller read it already (used only for it)."""
        runtime = self.runtime
        model = runtime.store.snapshot()
        view = request.pod if pod is request.object else PodView(pod)  # the view built at decode
        if reading is None or pod is not request.object:
            # Intent and GPU demand, remembered for replicas with the plan (webhook/placement/memo.py)
            reading = read_pod(view, model)
        intent = reading.intent
        namespace_object = model.namespaces.get(request.namespace)
        tenancy = runtime.tenancy_of(request, model)  # kept in the facts: the quota gate asks it again
        tenant = tenancy.tenant
        decision: Decision | None = None
        violations: list[Violation] = []
        demand = reading.demand
        usage = runtime.workload_usage(request, pod) if demand.asks_gpu else None
        wants_decision = (demand.asks_gpu or not intent.empty) and not intent.problems and not demand.invalid
        replica: ReplicaAnswer | None = None
        if runtime.policies is not None and (wants_decision or with_checks):
            try:
                # The policies' answer for this pod, remembered for its replicas under its `read_pod` bytes
                # (policy_glue.py): /validate asks the checks, /mutate a decision, of the pod its profile's
                # defaults leave
                decision, violations, replica = runtime.policy_glue.evaluate_for_pod(
                    request, pod, reading, namespace_object, model, tenant,
                    usage.policy_document() if usage is not None else None, decide=wants_decision, check=with_checks,
                )
            except PolicyEngineError as exc:
                # policies.failureMode: closed. /validate refuses; /mutate places without a decision
                # (it fails open by design, and /validate has the last word).
                log.warning("pod %s/%s: %s", request.namespace, request.name or "(generated)", exc)
                if with_checks:
                    violations = [Violation("kgwe.policy-engine", "Deny", str(exc))]
        check_deadline(deadline)
        if replica is not None and replica.plan is not None and replica.plan.config is runtime.config:
            # The plan memo's entry for this pod, intent, demand and decision, found when the answer was
            # (its key is a function of the replica answer's): what `planned_with_entry` gives from it.
            memo: PlanMemoEntry | None = replica.plan
            plan = copy_plan(replica.plan.plan)
        else:
            # build_plan, remembered for replicas (webhook/placement/memo.py)
            plan, memo = planned_with_entry(view, intent, decision, model, runtime.config, demand, reading)
            if replica is not None and memo is not None:
                replica.plan = memo
        return Facts(
            request, pod, model, intent, tenant, namespace_object, plan, decision, demand, violations, plan_memo=memo,
            usage=usage, device_asks=self.seams.asks_devices, tenancy=tenancy,
        )

    def _screen(self, request: AdmissionRequest) -> Outcome | None:
        """The answer to a request neither flow judges: refused when decode found it invalid, passed as it
        came when it is not a pod CREATE or UPDATE KGWE looks at; None for the rest."""
        if request.invalid is not None:
            return refuse_invalid(request)
        if not self._in_scope(request):
            return Outcome(object=request.object)
        return None

    def _is_controller(self, request: AdmissionRequest) -> bool:
        return request.user.username in self.runtime.config.controller_users


def refuse_invalid(request: AdmissionRequest) -> Outcome:
    """A request decode found out of bounds or malformed (`request.invalid`): refused, never judged."""
    outcome = Outcome.deny(f"KGWE cannot judge this request: {request.invalid}", code=400, reason="BadRequest")
    outcome.object = request.object
    return outcome


def check_deadline(deadline: float | None) -> None:
    """Raises DeadlineExceeded once the request's deadline (a `time.monotonic()` value) has passed."""
    if deadline is not None and time.monotonic() > deadline:
        raise DeadlineExceeded("admission deadline passed")
