"""One ValidatingAdmissionPolicy and its binding, applied as kube-apiserver applies them (cel-python standing in
for cel-go): match constraints (operations, resources, namespace selector), match conditions, then per param the
variables and validations; with params and none found, `parameterNotFoundAction`.

Any CEL error is raised, not mapped through `failurePolicy`: the chart's expressions must not fail on any pod.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import celpy

ALLOWED = "allowed"
SKIPPED = "skipped"  # the policy does not apply to the request


def labels_match(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A Kubernetes label selector as the API server reads a policy's (valid, schema-checked) selector."""
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator, values = expression["key"], expression["operator"], expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


class ApiServerPolicy:
    """A rendered policy (and its binding, None when the chart rendered no policy) with its CEL compiled once."""

    def __init__(self, policy: dict[str, Any] | None, binding: dict[str, Any] | None) -> None:
        self.policy = policy
        self.binding = binding
        self._env = celpy.Environment()
        self._programs: dict[str, Any] = {}

    def _run(self, expression: str, activation: dict[str, Any]) -> Any:
        program = self._programs.get(expression)
        if program is None:
            program = self._programs[expression] = self._env.program(self._env.compile(expression))
        result = program.evaluate(activation)
        if isinstance(result, celpy.CELEvalError):
            raise AssertionError(f"CEL error in {expression!r}: {result}")
        return result

    def _check(self, expression: str, activation: dict[str, Any]) -> bool:
        result = self._run(expression, activation)
        assert isinstance(result, celpy.celtypes.BoolType), f"{expression!r} gave {result!r}"
        return bool(result)

    def verdict(
        self,
        request: dict[str, Any],
        obj: dict[str, Any],
        namespace: dict[str, Any],
        params: Sequence[dict[str, Any]] = (),
    ) -> str:
        """SKIPPED, ALLOWED, or the message of the first refusing validation (its messageExpression's value)."""
        if self.policy is None:
            return SKIPPED
        spec = self.policy["spec"]
        constraints = spec["matchConstraints"]
        if not any(request["operation"] in rule["operations"] and request["resource"]["resource"] in rule["resources"]
                   for rule in constraints["resourceRules"]):
            return SKIPPED
        if not labels_match(constraints.get("namespaceSelector"), namespace["metadata"].get("labels") or {}):
            return SKIPPED
        activation: dict[str, Any] = {
            "object": celpy.json_to_cel(obj),
            "oldObject": celpy.json_to_cel(None),
            "request": celpy.json_to_cel(request),
            "namespaceObject": celpy.json_to_cel(namespace),
        }
        if not all(self._check(c["expression"], activation) for c in spec.get("matchConditions", [])):
            return SKIPPED
        if "paramKind" not in spec:
            return self._validate(spec, activation)
        assert self.binding is not None
        param_ref = self.binding["spec"]["paramRef"]
        chosen = [p for p in params if labels_match(param_ref["selector"], p["metadata"].get("labels") or {})]
        if not chosen:
            assert param_ref["parameterNotFoundAction"] == "Allow"
            return ALLOWED
        for param in chosen:
            answer = self._validate(spec, {**activation, "params": celpy.json_to_cel(param)})
            if answer != ALLOWED:
                return answer
        return ALLOWED

    def _validate(self, spec: dict[str, Any], activation: dict[str, Any]) -> str:
        variables: dict[Any, Any] = {}
        for variable in spec.get("variables", []):
            value = self._run(variable["expression"], {**activation, "variables": celpy.celtypes.MapType(variables)})
            variables[celpy.celtypes.StringType(variable["name"])] = value
        activation = {**activation, "variables": celpy.celtypes.MapType(variables)}
        for validation in spec["validations"]:
            if not self._check(validation["expression"], activation):
                if "messageExpression" in validation:
                    return str(self._run(validation["messageExpression"], activation))
                return str(validation["message"])
        return ALLOWED
