"""Why KGWE decided what it did about a pod, step by step (`kgwe explain`, `kgwe review --explain`, the
UI's "why", the Events on admitted and refused pods).

An `Explanation` is data gathered through the admission core's own code (the same `gather`, the same
plan, the same policy evaluation and gates, as a dry run: nothing is reserved), then rendered as text
or JSON by the functions at the bottom:

- the placement trace (webhook/placement/trace.py): each step, the accelerator types it kept and what
  dropped the others (memory, MIG layout, sharing, GPUs per node, NVLink domain size, gang clique);
- each policy and its result: the fields it decided, its Deny/Warn/Audit violations, and how many
  loaded policies had nothing to say;
- each check of the validating webhook: RBAC, quota, placement (no node could ever run it), policies;
- for a pod that exists and is not bound: what blocks it now. First what KGWE would refuse in it (a pod
  refused at admission today cannot be "blocked by nothing"), then scheduling gates (why its tenant's quota
  holds it, why its gang waits, as KGWE's controllers plan them), the scheduler's own
  reason (its `PodScheduled` condition), DRA claims not allocated yet, and KGWE's model node by node
  (cordoned, selector, taints, GPUs free after the bound pods).

Every string shown comes from the plan, the model or the policies' messages, which admission already
bounds; lists are capped so a pathological cluster cannot make the answer unbounded.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import orjson

from policies.vocabulary.keys import GANG as GANG_GATE
from policies.vocabulary.keys import QUOTA_GATE
from policies.vocabulary.objects import PodView
from webhook.admission.core import AdmissionService
from webhook.admission.facts import Facts
from webhook.admission.request import AdmissionRequest, decode_review
from webhook.admission.seams import PendingVerdict
from webhook.cluster.model import ClusterModel
from webhook.cluster.node_facts import NodeFacts
from webhook.config import Config
from webhook.explain_waiting import scheduler_reason, unallocated_claims
from webhook.placement.trace import TraceStep
from webhook.read_seams import GANG_READS, QUOTA_READS, WORKLOAD_READS
from webhook.review import create_review
from webhook.scheduling.predicates import explain_infeasible, feasible_nodes

MAX_LINES = 64  # per list in an explanation: a cluster of 10,000 types cannot make it unbounded
MAX_NODES = 10_000  # nodes examined for "blocks it now"


@dataclass
class PolicyResult:
    policy: str
    result: str  # "decided sharing, acceleratorTypes" | "Deny: ..." | "Warn: ..." | "Audit: ..."

    def as_json(self) -> dict[str, str]:
        return {"policy": self.policy, "result": self.result}


@dataclass
class Check:
    check: str  # RBAC | quota | placement | policy | invalid | ...
    result: str  # "ok" or the refusal

    def as_json(self) -> dict[str, str]:
        return {"check": self.check, "result": self.result}


@dataclass
class Explanation:
    """Everything `kgwe explain` says about one pod (see the module docstring)."""

    pod: str  # namespace/name
    state: str  # new | pending | bound to NODE | finished
    gpu_pod: bool
    allowed: bool | None = None  # for a new pod: the webhooks' verdict
    message: str = ""
    changes: int = 0  # patch operations the mutating webhook makes
    placement: dict[str, Any] = field(default_factory=dict)
    trace: list[TraceStep] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    policies: list[PolicyResult] = field(default_factory=list)
    policies_silent: int = 0
    checks: list[Check] = field(default_factory=list)
    blocking: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "state": self.state,
            "gpuPod": self.gpu_pod,
            "allowed": self.allowed,
            "message": self.message,
            "changes": self.changes,
            "placement": self.placement,
            "trace": [step.as_json() for step in self.trace],
            "refusals": self.refusals,
            "notes": self.notes,
            "warnings": self.warnings,
            "policies": [p.as_json() for p in self.policies],
            "policiesSilent": self.policies_silent,
            "checks": [c.as_json() for c in self.checks],
            "blocking": self.blocking,
        }


# -- gathering --------------------------------------------------------------------------------


def _request(pod: dict[str, Any], user: str, groups: list[str], admission: AdmissionService) -> AdmissionRequest:
    """A dry-run CREATE of `pod`, exactly as the API server would send it: checks reserve nothing."""
    review = create_review(pod, user, groups, WORKLOAD_READS.value.kind_table(admission.seams))
    review["request"]["dryRun"] = True
    return decode_review(orjson.dumps(review))


def _placement(facts: Facts) -> dict[str, Any]:
    plan = facts.plan
    out: dict[str, Any] = {"types": plan.types[:MAX_LINES], "sharing": plan.sharing, "steps": plan.steps}
    if plan.mig_profile:
        out["migProfile"] = plan.mig_profile
    if plan.gpu_fraction is not None:
        out["gpuFraction"] = f"{plan.gpu_fraction.normalize():f}"
    if plan.nvlink:
        out["nvlink"] = True
    if plan.gang:
        out["gang"] = plan.gang
    if plan.price_per_gpu_hour is not None:
        out["hourlyCost"] = f"{(plan.price_per_gpu_hour * plan.gpu_equivalents).quantize(Decimal('0.0001')):f}"
        out["chargedAs"] = plan.charge_type
    out["gpuEquivalents"] = f"{plan.gpu_equivalents.quantize(Decimal('0.0001')).normalize():f}"
    return out


def _policies(facts: Facts, admission: AdmissionService) -> tuple[list[PolicyResult], int]:
    results: dict[str, list[str]] = {}
    decided: dict[str, list[str]] = {}
    for name, policy in (facts.plan.decided_by or {}).items():
        decided.setdefault(policy, []).append(name)
    for policy, names in decided.items():
        results.setdefault(policy, []).append(f"decided {', '.join(sorted(names))}")
    for violation in facts.violations:
        results.setdefault(violation.policy, []).append(f"{violation.action}: {violation.message}")
    loaded: list[str] = []
    runtime_policies = admission.runtime.policies
    if runtime_policies is not None and hasattr(runtime_policies, "policy_names"):
        loaded = list(runtime_policies.policy_names())
    silent = len([name for name in loaded if name not in results])
    ordered = [PolicyResult(policy, "; ".join(parts)) for policy, parts in results.items()][:MAX_LINES]
    return ordered, silent


def _checks(admission: AdmissionService, request: AdmissionRequest, deadline: float | None) -> list[Check]:
    """Each part of the validating answer, as a dry run: the CPU-bound problems, then every gate."""
    pending = admission.prepare_verdict(request, deadline)
    if not isinstance(pending, PendingVerdict):
        return []
    problems = list(pending.problems)
    checks = [Check(reason, message) for reason, message in problems[:MAX_LINES]]
    seen = {reason for reason, _m in problems}
    checks.extend(Check(reason, "ok") for reason in ("policy", "placement") if reason not in seen)
    for gate in pending.gates:
        found = gate.run(deadline)
        checks.append(Check(gate.name, "; ".join(m for _r, m in found) if found else "ok"))
    return checks


def _state(pod: dict[str, Any]) -> str:
    view = PodView(pod)
    if view.terminal:
        return "finished"
    if view.node_name:
        return f"bound to {view.node_name}"
    return "pending"


def _free(node: NodeFacts, used: dict[str, Decimal]) -> NodeFacts:
    free = {key: value - used.get(key, Decimal(0)) for key, value in node.allocatable.items()}
    return dataclasses.replace(node, allocatable=free)


def blocking_now(pod: dict[str, Any], facts: Facts, config: Config, refused: list[str] | None = None) -> list[str]:
    """What keeps a created, unbound pod from running now: what KGWE would refuse (`refused`), gates, the
    scheduler's and DRA's word, then KGWE's model of the nodes."""
    from webhook.inventory.capacity import Inventory

    model: ClusterModel = facts.model
    reasons: list[str] = []
    if refused:
        # Said first: whatever else holds the pod, this pod as written is one KGWE refuses today.
        reasons.append(f"KGWE would refuse it as it is now (created before the rule, or admitted without KGWE): "
                       f"{'; '.join(refused[:8])}")
    view = PodView(pod)
    gates = view.scheduling_gates
    if QUOTA_GATE in gates:
        why = QUOTA_READS.value.why_waiting(model, config, f"{view.namespace}/{view.name}")
        reasons.append(f"waits for its tenant's quota (gate {QUOTA_GATE}): {why}" if why else
                       f"gate {QUOTA_GATE}: its tenant's quota holds it now; KGWE's quota controller removes the "
                       "gate on its next pass (docs/quotas.md)")
    if GANG_GATE in gates:
        gang = GANG_READS.value.why_gang_waits(model, config.gangs, pod)
        reasons.append(f"waits with its gang (gate {GANG_GATE}): {gang}" if gang else
                       f"held by scheduling gate {GANG_GATE}: a gang starts whole, in one NVLink room (docs/gangs.md)")
    others = [g for g in gates if g not in (QUOTA_GATE, GANG_GATE)]
    if others:
        reasons.append(f"held by scheduling gate{'s' if len(others) > 1 else ''} {', '.join(others[:8])}: the "
                       "scheduler does not consider it until whoever set it removes it")
    said = scheduler_reason(pod)
    if said:
        reasons.append(said)
    claims = unallocated_claims(pod, model)
    reasons.extend(claims)
    types = facts.plan.types or list(model.types)
    names = [n for t in types if t in model.types for n in model.types[t].nodes][:MAX_NODES]
    if not names:
        reasons.append("no GPU node of the types it may use exists")
        return reasons
    used = Inventory(model, config).node_used
    nodes = [_free(model.nodes[n], used.get(n, {})) for n in names if n in model.nodes]
    fits = feasible_nodes(pod, nodes)
    if fits:
        where = ", ".join(fits[:5]) + (f" and {len(fits) - 5} more" if len(fits) > 5 else "")
        room = f"{len(fits)} node{'s' if len(fits) != 1 else ''} can run it now ({where})"
        if not reasons:
            reasons.append(f"nothing in KGWE's model: {room}; the scheduler may not have retried yet, or something "
                           "KGWE does not model (CPU, memory, volumes, pod affinity) blocks it: "
                           "`kubectl describe pod`")
        elif not gates and not claims:
            reasons.append(f"GPUs are not what is missing: by KGWE's model {room}")
        return reasons
    wanted = ", ".join(types[:8]) if facts.plan.types else "every GPU node"
    reasons.append(f"no node can run it now: of {wanted}, {explain_infeasible(pod, nodes)} "
                   "(GPUs counted free after the bound pods' requests)")
    return reasons


def explain(
    admission: AdmissionService,
    pod: dict[str, Any],
    *,
    user: str = "kgwe-explain",
    groups: list[str] | None = None,
    existing: bool = False,
    deadline_seconds: float = 10.0,
) -> Explanation:
    """The explanation of `pod`: as a new pod (`existing` False: what the webhooks would answer and why)
    or as the pod that exists in the cluster (its plan, its policies, and what blocks it now)."""
    groups = list(groups or [])
    pod = copy.deepcopy(pod)
    metadata = pod.setdefault("metadata", {})
    metadata.setdefault("namespace", "default")
    name = f"{metadata['namespace']}/{metadata.get('name') or metadata.get('generateName') or '<unnamed>'}"
    deadline = time.monotonic() + deadline_seconds
    request = _request(pod, user, groups, admission)
    facts = admission.gather(request, pod, deadline, with_checks=True)
    plan = facts.plan
    explanation = Explanation(
        pod=name,
        state="new" if not existing else _state(pod),
        gpu_pod=plan.gpu_pod,
        placement=_placement(facts) if plan.gpu_pod else {},
        trace=plan.trace[:MAX_LINES],
        refusals=plan.refusals[:MAX_LINES],
        notes=plan.notes[:MAX_LINES],
        warnings=(facts.intent.warnings + plan.warnings)[:MAX_LINES],
    )
    explanation.policies, explanation.policies_silent = _policies(facts, admission)
    if not existing:
        # As the API server does: the mutating answer, then the validating webhook sees the patched pod.
        # Both as dry runs, so explaining reserves no quota and records no gang.
        mutated = admission.mutate(request, deadline)
        if not mutated.allowed:
            explanation.allowed, explanation.message = False, mutated.message
            return explanation
        patched = mutated.object if mutated.patch and mutated.object is not None else pod
        validating = _request(patched, user, groups, admission)
        explanation.checks = _checks(admission, validating, deadline)
        verdict = admission.validate(validating, deadline)
        explanation.allowed = verdict.allowed
        explanation.message = verdict.message
        explanation.changes = len(mutated.patch)
        explanation.warnings = list(dict.fromkeys([*explanation.warnings, *verdict.warnings]))[:MAX_LINES]
    elif explanation.state == "pending" and plan.gpu_pod:
        denied = [f"{p.policy}: {p.result}" for p in explanation.policies if "Deny:" in p.result]
        explanation.blocking = blocking_now(pod, facts, admission.runtime.config,
                                            [*explanation.refusals, *denied])
    return explanation


# -- rendering --------------------------------------------------------------------------------


def _step_line(index: int, step: TraceStep) -> list[str]:
    kept = ", ".join(step.kept) if step.kept else "none"
    lines = [f"  {index}. {step.step}: kept {kept}" + (f" ({step.note})" if step.note else "")]
    whys = {why for _t, why in step.dropped}
    if len(step.dropped) > 1 and len(whys) == 1:  # one reason for all: say it once
        lines.append(f"       dropped {', '.join(t for t, _w in step.dropped)}: {whys.pop()}")
    else:
        lines.extend(f"       dropped {type_id}: {why}" for type_id, why in step.dropped)
    return lines


def render_text(explanation: Explanation) -> str:
    """The readable form (`kgwe explain`, `kgwe review --explain`)."""
    e = explanation
    head = f"pod {e.pod} ({e.state})"
    if e.allowed is not None:
        verdict = "ALLOWED" if e.allowed else "DENIED"
        changed = e.allowed and e.changes
        head += f": {verdict}" + (f" with {e.changes} change{'s' if e.changes != 1 else ''}" if changed else "")
    lines = [head]
    if e.message:
        lines.append(f"  reason: {e.message}")
    if not e.gpu_pod:
        lines.append("not a GPU pod and no kgwe.io/ intent: KGWE leaves it as it is")
    if e.trace or e.refusals:
        lines.append("placement, step by step (candidate accelerator types):")
        for index, step in enumerate(e.trace, 1):
            lines.extend(_step_line(index, step))
        lines.extend(f"  refused: {r}" for r in e.refusals if r not in e.message)
    if e.placement and not e.refusals:
        p = e.placement
        parts = [f"types {', '.join(p['types']) or 'none'}", f"sharing {p['sharing']}"]
        if p.get("migProfile"):
            parts.append(f"MIG {p['migProfile']}")
        if p.get("nvlink"):
            parts.append("one NVLink domain")
        if p.get("gang"):
            parts.append(f"gang {p['gang']}")
        if p.get("hourlyCost"):
            parts.append(f"{p['gpuEquivalents']} GPU-equivalents, {p['hourlyCost']}/h as {p['chargedAs']}")
        lines.append("result: " + "; ".join(parts))
    if e.notes:
        lines.append("notes:")
        lines.extend(f"  - {n}" for n in e.notes)
    if e.policies or e.policies_silent:
        lines.append("policies:")
        lines.extend(f"  {p.policy}: {p.result}" for p in e.policies)
        if e.policies_silent:
            lines.append(f"  {e.policies_silent} other polic{'ies' if e.policies_silent != 1 else 'y'}: "
                         "no decision, no violation")
    if e.checks:
        lines.append("checks of the validating webhook:")
        lines.extend(f"  {c.check}: {c.result}" for c in e.checks)
    if e.warnings:
        lines.append("warnings:")
        lines.extend(f"  - {w}" for w in e.warnings)
    if e.blocking:
        lines.append("what blocks it now:")
        lines.extend(f"  - {b}" for b in e.blocking)
    return "\n".join(lines)


def event_message(explanation: Explanation, limit: int = 1024) -> str:
    """One line for a Kubernetes Event on the pod (the API server caps an Event's message at 1 KiB)."""
    e = explanation
    parts: list[str] = []
    if e.refusals:
        parts.append("refused: " + "; ".join(e.refusals))
    elif e.placement:
        p = e.placement
        what = f"sharing {p['sharing']}" + (f" MIG {p['migProfile']}" if p.get("migProfile") else "")
        parts.append(f"placed on {', '.join(p['types']) or 'no type'} ({what})")
    for step in e.trace:
        if step.dropped:
            dropped = ", ".join(f"{t} ({why})" for t, why in step.dropped)
            parts.append(f"{step.step} dropped {dropped}")
    for policy in e.policies:
        parts.append(f"{policy.policy}: {policy.result}")
    text = "; ".join(parts) or "no placement change"
    return text if len(text) <= limit else text[: limit - 1] + "…"
