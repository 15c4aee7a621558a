"""`GPUPolicy` objects (SPEC section 6) parsed and compiled once: match rules, CEL match conditions and
validations, an optional inline Rego module, params and the enforcement action.

A policy that does not compile raises `PolicyCompileError` with every problem found, so the status
condition on the object can name them all.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from policies.api import ENFORCEMENT_ACTIONS, EnforcementAction
from policies.engines.cel import CelCompileError, CelEngine, CelProgram
from policies.engines.rego_source import RegoModuleInfo, RegoSourceError, inspect_module
from policies.vocabulary.objects import ObjectView
from policies.vocabulary.selectors import LabelSelector, parse_selector

OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
DEFAULT_OPERATIONS = frozenset({"CREATE", "UPDATE"})

# What the runtime evaluates policies for: `/validate`'s checks, `/mutate`'s placement decision, or both.
Purpose = Literal["check", "decide", "evaluate"]
# The Rego rule kinds each purpose runs; a GPUPolicy with validations runs for `check` and `evaluate` too.
PURPOSE_KINDS: dict[Purpose, frozenset[str]] = {
    "check": frozenset({"deny", "warn"}),
    "decide": frozenset({"decision"}),
    "evaluate": frozenset({"deny", "warn", "decision"}),
}


class PolicyCompileError(ValueError):
    pass


# What `MatchRules.matches` reads of the runtime's document (the request, the namespace object).
MATCH_READS: frozenset[tuple[str, ...]] = frozenset({
    ("request", "operation"), ("request", "namespace"), ("request", "object", "metadata", "namespace"),
    ("request", "object", "metadata", "labels"), ("namespaceObject", "metadata", "labels"),
})


@dataclass(frozen=True)
class MatchRules:
    namespaces: frozenset[str] | None
    namespace_selector: LabelSelector | None
    object_selector: LabelSelector | None
    operations: frozenset[str]

    def matches(self, request: Mapping[str, Any], namespace_object: Mapping[str, Any] | None) -> bool:
        if request.get("operation", "CREATE") not in self.operations:
            return False
        obj = ObjectView(request.get("object"))
        namespace = request.get("namespace") or obj.namespace
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        if self.namespace_selector is not None:
            labels = dict(ObjectView(namespace_object).labels)
            labels.setdefault("kubernetes.io/metadata.name", namespace)
            if not self.namespace_selector.matches(labels):
                return False
        return self.object_selector is None or self.object_selector.matches(obj.labels)


@dataclass(frozen=True)
class CelValidation:
    expression: CelProgram
    message: str
    message_expression: CelProgram | None


@dataclass(frozen=True)
class CompiledGPUPolicy:
    name: str
    action: EnforcementAction
    match: MatchRules
    match_conditions: tuple[tuple[str, CelProgram], ...]
    validations: tuple[CelValidation, ...]
    params: dict[str, Any]
    rego_module: str | None
    rego_info: RegoModuleInfo | None
    fingerprint: str  # changes whenever the spec changes; reload compares it
    params_key: bytes = field(default=b"")  # canonical JSON of params: the same params, the same CEL values
    params_slot: str = ""  # this policy's params in the request's shared CEL activation (params_slot())

    def runs_for(self, purpose: Purpose) -> bool:
        """Whether the policy has anything to say for `purpose`."""
        if purpose != "decide" and self.validations:
            return True
        return self.rego_info is not None and bool(self.rego_info.rules & PURPOSE_KINDS[purpose])

    def cel_programs(self) -> list[CelProgram]:
        """Every CEL program of the policy: match conditions, validations and their message expressions."""
        programs = [program for _name, program in self.match_conditions]
        for validation in self.validations:
            programs.append(validation.expression)
            if validation.message_expression is not None:
                programs.append(validation.message_expression)
        return programs


def params_slot(params_key: bytes) -> str:
    """A short name for one params document: its entry in a shared CEL activation's params table."""
    return hashlib.sha256(params_key).hexdigest()[:24]


def fingerprint(obj: Mapping[str, Any]) -> str:
    # Keys that are not strings (a YAML manifest may hold them) are written as strings: a fingerprint is
    # taken of every object, well formed or not (compile_gpu_policy refuses the malformed ones).
    spec = obj.get("spec") or {}
    return hashlib.sha256(orjson.dumps(spec, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)).hexdigest()


def policy_name(obj: Mapping[str, Any]) -> str:
    return ObjectView(obj).name


def _match_rules(spec: Mapping[str, Any], errors: list[str]) -> MatchRules:
    match = spec.get("match") or {}
    namespaces = match.get("namespaces")
    operations = match.get("operations")
    if operations is not None:
        bad = [op for op in operations if op not in (*OPERATIONS, "*")]
        if bad:
            errors.append(f"match.operations: unknown {bad}")
        chosen = frozenset(OPERATIONS) if "*" in operations else frozenset(operations)
    else:
        chosen = DEFAULT_OPERATIONS
    selectors: dict[str, LabelSelector | None] = {}
    for key in ("namespaceSelector", "objectSelector"):
        try:
            selectors[key] = parse_selector(match.get(key))
        except ValueError as exc:
            errors.append(f"match.{key}: {exc}")
            selectors[key] = None
    return MatchRules(
        namespaces=frozenset(str(n) for n in namespaces) if namespaces is not None else None,
        namespace_selector=selectors["namespaceSelector"],
        object_selector=selectors["objectSelector"],
        operations=chosen,
    )


def _compile(cel: CelEngine, where: str, expression: Any, errors: list[str], params_slot: str) -> CelProgram | None:
    if not isinstance(expression, str):
        errors.append(f"{where}: expression must be a string")
        return None
    try:
        return cel.compile_for_policy(expression, params_slot)
    except CelCompileError as exc:
        errors.append(f"{where}: {exc}")
        return None


def _list_of(value: Any, kind: type, where: str, errors: list[str]) -> None:
    if value is not None and (not isinstance(value, list) or not all(isinstance(v, kind) for v in value)):
        errors.append(f"{where} must be a list of {'strings' if kind is str else 'objects'}")


def shape_errors(obj: Mapping[str, Any]) -> list[str]:
    """What in a GPUPolicy object does not have the shape its CRD schema gives (a manifest from a
    directory is checked by nobody else). Anything else is read as if it were well formed: a string
    for a list would be iterated character by character (`namespaces: team-a` would match namespaces
    `t`, `e`, ...), an object for a list would fail the whole reload. Such a policy is refused instead,
    with these messages, and its last good version keeps serving."""
    spec = obj.get("spec")
    if spec is None:
        return []
    if not isinstance(spec, dict):
        return ["spec must be an object"]
    errors: list[str] = []
    match = spec.get("match")
    if match is not None and not isinstance(match, dict):
        errors.append("spec.match must be an object")
    elif match is not None:
        _list_of(match.get("namespaces"), str, "spec.match.namespaces", errors)
        _list_of(match.get("operations"), str, "spec.match.operations", errors)
    _list_of(spec.get("matchConditions"), dict, "spec.matchConditions", errors)
    _list_of(spec.get("validations"), dict, "spec.validations", errors)
    rego = spec.get("rego")
    if rego is not None and not isinstance(rego, dict):
        errors.append("spec.rego must be an object")
    params = spec.get("params") or {}
    try:
        # What JSON cannot hold would be written as something else: YAML's .nan and .inf become null,
        # so policies with {max: .inf} and {max: null} would share one params entry (params_slot) and
        # one CEL value per expression, one answering with the other's params.
        exact = orjson.loads(orjson.dumps(params, option=orjson.OPT_SORT_KEYS)) == params
    except TypeError as exc:
        errors.append(f"spec.params is not JSON: {exc}")
    else:
        if not exact:
            errors.append("spec.params is not JSON: it holds a value JSON cannot write (NaN, an infinity)")
    return errors


def compile_gpu_policy(obj: Mapping[str, Any], cel: CelEngine) -> CompiledGPUPolicy:
    name = policy_name(obj)
    if shape := shape_errors(obj):
        raise PolicyCompileError("; ".join([*([] if name else ["metadata.name is required"]), *shape]))
    spec = obj.get("spec") or {}
    errors: list[str] = []
    if not name:
        errors.append("metadata.name is required")
    action = spec.get("enforcementAction", "Deny")
    if action not in ENFORCEMENT_ACTIONS:
        errors.append(f"spec.enforcementAction: {action!r} is not one of {', '.join(ENFORCEMENT_ACTIONS)}")
    match = _match_rules(spec, errors)
    params = spec.get("params") or {}
    if not isinstance(params, dict):
        errors.append("spec.params must be an object")
        params = {}
    params_key = orjson.dumps(params, option=orjson.OPT_SORT_KEYS)
    slot = params_slot(params_key)
    conditions: list[tuple[str, CelProgram]] = []
    for index, condition in enumerate(spec.get("matchConditions") or []):
        program = _compile(cel, f"spec.matchConditions[{index}]", condition.get("expression"), errors, slot)
        if program is not None:
            conditions.append((str(condition.get("name") or index), program))
    validations: list[CelValidation] = []
    for index, validation in enumerate(spec.get("validations") or []):
        where = f"spec.validations[{index}]"
        program = _compile(cel, where, validation.get("expression"), errors, slot)
        message_program = None
        if validation.get("messageExpression") is not None:
            message_program = _compile(cel, f"{where}.messageExpression", validation["messageExpression"], errors,
                                     slot)
        if program is not None:
            default = f"failed expression: {program.source}"
            validations.append(CelValidation(program, str(validation.get("message") or default), message_program))
    module = (spec.get("rego") or {}).get("module")
    info = None
    if module is not None:
        try:
            info = inspect_module(str(module))
        except RegoSourceError as exc:
            errors.append(f"spec.rego.module: {exc}")
    if not (validations or info or errors):
        errors.append("a GPUPolicy needs validations or a rego module")
    if errors:
        raise PolicyCompileError("; ".join(errors))
    return CompiledGPUPolicy(
        name=name,
        action=action,
        match=match,
        match_conditions=tuple(conditions),
        validations=tuple(validations),
        params=params,
        rego_module=str(module) if module is not None else None,
        rego_info=info,
        fingerprint=fingerprint(obj),
        params_key=params_key,
        params_slot=slot,
    )
