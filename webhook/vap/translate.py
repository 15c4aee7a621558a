"""One GPUPolicy as a ValidatingAdmissionPolicy and its binding, or why it cannot be one.

A GPUPolicy qualifies when the API server alone can decide it exactly as KGWE does: CEL only (no Rego:
the API server runs none), at least one validation, and no expression reading what only KGWE has
(`usage`, the workload's GPU usage) or what the API server's `request` lacks (`request.object`,
`request.oldObject`: KGWE's `request` is the AdmissionReview request, the API server's its attributes).
CEL GPUPolicies see no cluster summary and no RBAC answers, so nothing else ties them to KGWE.

How the pieces map:

- `params` become a CEL literal in the variable `params` (`variables.params` in the expressions,
  rewritten token by token: strings, comments and fields named `params` are left alone). An expression
  binding a comprehension variable named `params` is not rewritten, and the policy does not qualify.
- `match`: operations and the pods resource; `namespaces` and `namespaceSelector` one namespace selector
  (with the namespaces KGWE never judges excluded); `objectSelector` as is.
- a first match condition sends the policy only the pods the validating webhook is sent (a GPU resource,
  DRA claims, a `kgwe.io/` annotation; on UPDATE only a change of labels, annotations or gates), so the
  API server judges no pod KGWE would not; the policy's own match conditions follow.
- `enforcementAction` Deny, Warn, Audit: the binding's `validationActions`; `failurePolicy: Fail`, as a
  policy KGWE cannot evaluate refuses a GPU pod.
- owner reference to the GPUPolicy (both cluster-scoped): deleting the GPUPolicy deletes them even
  while KGWE is down.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from policies.engines.cel_text import Token, is_field, lex, opens_root_name
from policies.vocabulary import resources

API_VERSION = "admissionregistration.k8s.io/v1"
POLICY_KIND = "ValidatingAdmissionPolicy"
BINDING_KIND = "ValidatingAdmissionPolicyBinding"
GPU_POLICY_API = "kgwe.io/v1alpha1"
LABEL_GPU_POLICY = "kgwe.io/gpupolicy"
MANAGED_BY = {"app.kubernetes.io/managed-by": "kgwe"}
NAME_PREFIX = "kgwe-gpupolicy-"
JUDGED_CONDITION = "kgwe-judged-pod"
ACTIONS = {"Deny": "Deny", "Warn": "Warn", "Audit": "Audit"}
# DRA: pods naming claims, or asking devices as extended resources, reach the webhook too.
DRA_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"
INT64 = 2**63


@dataclass(frozen=True)
class Generated:
    name: str
    policy: dict[str, Any]
    binding: dict[str, Any]


def generated_name(policy_name: str) -> str:
    """`kgwe-gpupolicy-<name>`, shortened with a hash where that passes the 253 characters of a name."""
    name = NAME_PREFIX + policy_name
    if len(name) <= 253:
        return name
    digest = hashlib.sha256(policy_name.encode()).hexdigest()[:16]
    return f"{name[:236]}-{digest}"


def cel_literal(value: Any) -> str:
    """A JSON value as a CEL literal; ValueError for what CEL cannot hold exactly."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if not -INT64 <= value < INT64:
            raise ValueError(f"{value} does not fit a CEL int")
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("params hold a number CEL has no literal for")
        text = repr(value)
        return text if any(c in text for c in ".e") else text + ".0"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(cel_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k), ensure_ascii=False)}: {cel_literal(v)}"
                               for k, v in value.items()) + "}"
    raise ValueError(f"params hold a {type(value).__name__}")


def _root_words(tokens: list[Token], word: str) -> list[int]:
    """Indexes of `word` used as a variable (not a field): `word` or `.word`."""
    return [i for i, t in enumerate(tokens) if t.kind == "ident" and t.text == word and not is_field(tokens, i)]


def rewrite(expression: str) -> tuple[str, bool]:
    """(the expression for the API server, whether it reads params); ValueError when it cannot be one."""
    tokens = lex(expression)
    if _root_words(tokens, "usage"):
        raise ValueError("it reads usage, which only KGWE has")
    for index in _root_words(tokens, "request"):
        nxt = tokens[index + 1:index + 3]
        if len(nxt) < 2 or nxt[0].text not in (".", "[") or nxt[1].text.strip("'\"?") in ("object", "oldObject"):
            raise ValueError("it reads the request's objects, which the API server's request does not hold")
    places = _root_words(tokens, "params")
    for index in places:
        before = tokens[index - 1] if index > 0 else None
        after = tokens[index + 1] if index + 1 < len(tokens) else None
        if before is not None and before.text == "(" and after is not None and after.text == ",":
            raise ValueError("it binds a variable named params")
    out: list[str] = []
    last = 0
    for index in places:
        start = tokens[index].start
        if index > 0 and opens_root_name(tokens, index - 1):
            start = tokens[index - 1].start  # `.params`: the root dot goes too
        out.append(expression[last:start])
        out.append("variables.params")
        last = tokens[index].end
    out.append(expression[last:])
    return "".join(out), bool(places)


def judged_pod_condition(gpu_prefixes: Sequence[str]) -> str:
    """CEL: the pod is one the validating webhook is sent (the chart's matchConditions, as one)."""
    prefixes = [*gpu_prefixes, DRA_RESOURCE_PREFIX]
    match = " || ".join(f"r.startsWith({json.dumps(p)})" for p in prefixes)
    container = (f"has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(r, {match})) || "
                 f"(has(c.resources.requests) && c.resources.requests.exists(r, {match})))")
    asks = (f"object.spec.containers.exists(c, {container}) || (has(object.spec.initContainers) && "
            f"object.spec.initContainers.exists(c, {container})) || "
            "(has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0)")
    kgwe = "(has(object.metadata.annotations) && object.metadata.annotations.exists(k, k.startsWith('kgwe.io/')))"
    changed = " || ".join(
        f"(has(object.metadata.{f}) != has(oldObject.metadata.{f})) || "
        f"(has(object.metadata.{f}) && object.metadata.{f} != oldObject.metadata.{f})"
        for f in ("labels", "annotations")
    )
    gates = ("(has(object.spec.schedulingGates) != has(oldObject.spec.schedulingGates)) || "
             "(has(object.spec.schedulingGates) && object.spec.schedulingGates != oldObject.spec.schedulingGates)")
    return f"({asks} || {kgwe}) && (request.operation != 'UPDATE' || {changed} || {gates})"


def _namespace_selector(match: Mapping[str, Any], excluded: Sequence[str]) -> dict[str, Any]:
    expressions: list[dict[str, Any]] = [
        {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": sorted(set(excluded))}
    ]
    namespaces = match.get("namespaces")
    if isinstance(namespaces, list):
        expressions.append({"key": "kubernetes.io/metadata.name", "operator": "In", "values": sorted(namespaces)})
    selector: dict[str, Any] = {}
    user = match.get("namespaceSelector")
    if isinstance(user, dict):
        if user.get("matchLabels"):
            selector["matchLabels"] = dict(user["matchLabels"])
        expressions.extend(user.get("matchExpressions") or [])
    selector["matchExpressions"] = expressions
    return selector


def _operations(match: Mapping[str, Any]) -> list[str]:
    operations = match.get("operations")
    if not isinstance(operations, list) or not operations:
        return ["CREATE", "UPDATE"]
    return ["*"] if "*" in operations else sorted(set(operations))


def translate(
    gpu_policy: Mapping[str, Any], *, excluded_namespaces: Sequence[str],
    gpu_prefixes: Sequence[str] = resources.GPU_RESOURCE_PREFIXES,
) -> Generated:
    """The policy and binding for `gpu_policy`; ValueError saying why it does not qualify."""
    meta = gpu_policy.get("metadata") or {}
    spec = gpu_policy.get("spec") or {}
    name = str(meta.get("name") or "")
    if spec.get("rego"):
        raise ValueError("it has Rego, which the API server does not run")
    validations = spec.get("validations")
    if not isinstance(validations, list) or not validations:
        raise ValueError("it has no CEL validations")
    action = ACTIONS.get(str(spec.get("enforcementAction") or "Deny"))
    if action is None:
        raise ValueError(f"enforcementAction {spec.get('enforcementAction')!r}")
    reads_params = False
    conditions = [{"name": JUDGED_CONDITION, "expression": judged_pod_condition(gpu_prefixes)}]
    for condition in spec.get("matchConditions") or []:
        expression, reads = rewrite(str(condition["expression"]))
        reads_params |= reads
        conditions.append({"name": str(condition["name"]), "expression": expression})
    if len({c["name"] for c in conditions}) != len(conditions):
        raise ValueError(f"a match condition is named {JUDGED_CONDITION}")
    checks: list[dict[str, Any]] = []
    for validation in validations:
        expression, reads = rewrite(str(validation["expression"]))
        reads_params |= reads
        check: dict[str, Any] = {"expression": expression}
        if validation.get("message"):
            # The API server refuses a message with line breaks.
            check["message"] = " ".join(str(validation["message"]).split())
        if validation.get("messageExpression"):
            message, reads = rewrite(str(validation["messageExpression"]))
            reads_params |= reads
            check["messageExpression"] = message
        checks.append(check)
    match = spec.get("match") or {}
    policy_spec: dict[str, Any] = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": _operations(match),
                               "resources": ["pods"], "scope": "Namespaced"}],
            "namespaceSelector": _namespace_selector(match, excluded_namespaces),
        },
        "matchConditions": conditions,
    }
    if isinstance(match.get("objectSelector"), dict):
        policy_spec["matchConstraints"]["objectSelector"] = match["objectSelector"]
    if reads_params:
        policy_spec["variables"] = [{"name": "params", "expression": cel_literal(spec.get("params") or {})}]
    policy_spec["validations"] = checks
    generated = generated_name(name)
    metadata = {
        "name": generated,
        # A label value holds 63 characters; a longer name is known by its hash.
        "labels": {**MANAGED_BY,
                   LABEL_GPU_POLICY: name if len(name) <= 63 else hashlib.sha256(name.encode()).hexdigest()[:32]},
        "ownerReferences": [{"apiVersion": GPU_POLICY_API, "kind": "GPUPolicy", "name": name,
                             "uid": str(meta.get("uid") or ""), "blockOwnerDeletion": False}],
    }
    if not meta.get("uid"):
        del metadata["ownerReferences"]  # a directory's GPUPolicy has no object to own them
    policy = {"apiVersion": API_VERSION, "kind": POLICY_KIND, "metadata": metadata, "spec": policy_spec}
    binding = {"apiVersion": API_VERSION, "kind": BINDING_KIND, "metadata": json.loads(json.dumps(metadata)),
               "spec": {"policyName": generated, "validationActions": [action]}}
    return Generated(generated, policy, binding)
