"""Input bounds: what a request may look like before any decision work starts.

Everything in an AdmissionReview's `object` is written by the pod's creator, who may be hostile. The
API server accepts up to 256 KiB of annotations and objects of any nesting, and a forged caller can
send shapes the API server never would (annotations as a string, containers as a mapping). The
admission core, the policy engines and JSON serialisers each have their own, different, breaking
points (orjson stops at 254 levels of nesting), so the bounds are checked once, here, in linear time,
and a request outside them is refused with a message that names the limit: it never reaches code
that could fail open.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Deeper than any object Kubernetes builds (a JobSet's pod template and its managedFields stay under
# 30 levels), far below every serialiser's and engine's own recursion limit.
MAX_NESTING_DEPTH = 64
# JSON nodes (objects, arrays and scalars) in one request: a pod with the API server's 256 KiB of
# annotations and 1.5 MiB of spec stays well under this.
MAX_NODES = 400_000


class ObjectOutOfBounds(ValueError):
    """The request's object breaks an input bound or has a shape the API server never sends."""


def check_bounds(value: Any, what: str = "request") -> None:
    """Raise ObjectOutOfBounds when `value` nests deeper than MAX_NESTING_DEPTH or has too many nodes.

    Iterative (no recursion limit of our own to hit) and linear in the size of `value`.
    """
    nodes = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    pop = stack.pop
    push = stack.append
    while stack:
        item, depth = pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item  # type: ignore[assignment]
        else:
            continue
        if depth > MAX_NESTING_DEPTH:
            raise ObjectOutOfBounds(f"{what} nests deeper than {MAX_NESTING_DEPTH} levels (the limit)")
        nodes += len(children)
        if nodes > MAX_NODES:
            raise ObjectOutOfBounds(f"{what} has more than {MAX_NODES} JSON values (the limit)")
        for child in children:
            if isinstance(child, (dict, list)):
                push((child, depth + 1))


def _expect(value: Any, kind: type, where: str) -> None:
    if not isinstance(value, kind):
        raise ObjectOutOfBounds(f"{where} must be a JSON {'object' if kind is dict else 'array'}")


def _string_map(value: Any, where: str) -> None:
    _expect(value, dict, where)
    for key, item in value.items():
        if not isinstance(item, str):
            raise ObjectOutOfBounds(f"{where}[{str(key)[:63]!r}] must be a string")


def _optional(mapping: Mapping[str, Any], key: str) -> Any:
    value = mapping.get(key)
    return None if value is None else value


def check_pod_shape(pod: Any, where: str = "object") -> None:
    """Raise ObjectOutOfBounds unless the parts of a Pod KGWE reads have the types the API server sends.

    Only those parts: the API server has validated the rest against the Pod schema, and a forged
    request with other oddities cannot reach a decision through them.
    """
    _expect(pod, dict, where)
    metadata = _optional(pod, "metadata")
    if metadata is not None:
        _expect(metadata, dict, f"{where}.metadata")
        for key in ("annotations", "labels"):
            if metadata.get(key) is not None:
                _string_map(metadata[key], f"{where}.metadata.{key}")
        for key in ("name", "namespace", "generateName", "uid"):
            if metadata.get(key) is not None and not isinstance(metadata[key], str):
                raise ObjectOutOfBounds(f"{where}.metadata.{key} must be a string")
    spec = _optional(pod, "spec")
    if spec is None:
        return
    _expect(spec, dict, f"{where}.spec")
    if spec.get("nodeSelector") is not None:
        _string_map(spec["nodeSelector"], f"{where}.spec.nodeSelector")
    for key in ("tolerations", "schedulingGates", "resourceClaims"):
        if spec.get(key) is not None:
            _expect(spec[key], list, f"{where}.spec.{key}")
            for index, item in enumerate(spec[key]):
                _expect(item, dict, f"{where}.spec.{key}[{index}]")
    if spec.get("affinity") is not None:
        _expect(spec["affinity"], dict, f"{where}.spec.affinity")
    if spec.get("nodeName") is not None and not isinstance(spec["nodeName"], str):
        raise ObjectOutOfBounds(f"{where}.spec.nodeName must be a string")
    for key in ("containers", "initContainers", "ephemeralContainers"):
        containers = spec.get(key)
        if containers is None:
            continue
        _expect(containers, list, f"{where}.spec.{key}")
        for index, container in enumerate(containers):
            _check_container(container, f"{where}.spec.{key}[{index}]")


def _check_container(container: Any, where: str) -> None:
    _expect(container, dict, where)
    if container.get("env") is not None:
        _expect(container["env"], list, f"{where}.env")
        for index, item in enumerate(container["env"]):
            _expect(item, dict, f"{where}.env[{index}]")
    resources = container.get("resources")
    if resources is None:
        return
    _expect(resources, dict, f"{where}.resources")
    for section in ("limits", "requests"):
        amounts = resources.get(section)
        if amounts is None:
            continue
        _expect(amounts, dict, f"{where}.resources.{section}")
        for name, amount in amounts.items():
            if isinstance(amount, bool) or not isinstance(amount, (str, int, float)):
                raise ObjectOutOfBounds(f"{where}.resources.{section}[{str(name)[:63]!r}] must be a quantity")
    if resources.get("claims") is not None:
        _expect(resources["claims"], list, f"{where}.resources.claims")
