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

from typing import Any, NoReturn

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


# The types a part may have, exactly: a set of the types found is compared with these in C, for the common case;
# only a part that fails (a subclass, or a wrong type) is walked in Python to be judged and named.
_STRINGS = frozenset({str})
_OBJECTS = frozenset({dict})
_QUANTITIES = frozenset({str, int, float})  # not bool: type(True) is bool


def _expect(value: Any, kind: type, where: str) -> None:
    if not isinstance(value, kind):
        _wrong_type(kind, where)


def _wrong_type(kind: type, where: str) -> NoReturn:
    raise ObjectOutOfBounds(f"{where} must be a JSON {'object' if kind is dict else 'array'}")


def _string_map(value: Any, where: str) -> None:
    _expect(value, dict, where)
    for key, item in value.items():
        if not isinstance(item, str):
            raise ObjectOutOfBounds(f"{where}[{str(key)[:63]!r}] must be a string")


def check_pod_shape(pod: Any, where: str = "object") -> None:
    """Raise ObjectOutOfBounds unless the parts of a Pod KGWE reads have the types the API server sends.

    Only those parts: the API server has validated the rest against the Pod schema, and a forged
    request with other oddities cannot reach a decision through them.
    """
    # Every pod of every request passes here: the path of a part (`object.spec.containers[0]`) is built
    # only when that part is wrong, never for the parts that are right.
    if not isinstance(pod, dict):
        _wrong_type(dict, where)
    metadata = pod.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            _wrong_type(dict, f"{where}.metadata")
        for key in ("annotations", "labels"):
            value = metadata.get(key)
            if value is not None and not (type(value) is dict and _STRINGS.issuperset(map(type, value.values()))):
                _string_map(value, f"{where}.metadata.{key}")  # the full check, naming the wrong entry
        for key in ("name", "namespace", "generateName", "uid"):
            value = metadata.get(key)
            if value is not None and not isinstance(value, str):
                raise ObjectOutOfBounds(f"{where}.metadata.{key} must be a string")
    spec = pod.get("spec")
    if spec is None:
        return
    if not isinstance(spec, dict):
        _wrong_type(dict, f"{where}.spec")
    selector = spec.get("nodeSelector")
    if selector is not None and not (type(selector) is dict and _STRINGS.issuperset(map(type, selector.values()))):
        _string_map(selector, f"{where}.spec.nodeSelector")
    for key in ("tolerations", "schedulingGates", "resourceClaims"):
        items = _spec_list(spec, key, where)
        if not _OBJECTS.issuperset(map(type, items)):
            for index, item in enumerate(items):
                if not isinstance(item, dict):
                    _wrong_type(dict, f"{where}.spec.{key}[{index}]")
    affinity = spec.get("affinity")
    if affinity is not None and not isinstance(affinity, dict):
        _wrong_type(dict, f"{where}.spec.affinity")
    node_name = spec.get("nodeName")
    if node_name is not None and not isinstance(node_name, str):
        raise ObjectOutOfBounds(f"{where}.spec.nodeName must be a string")
    for key in ("containers", "initContainers", "ephemeralContainers"):
        for index, container in enumerate(_spec_list(spec, key, where)):
            _check_container(container, where, key, index)


def _spec_list(spec: dict[str, Any], key: str, where: str) -> list[Any]:
    """`spec[key]`, a list, or none (`[]`); anything else is refused."""
    items = spec.get(key)
    if items is None:
        return []
    if not isinstance(items, list):
        _wrong_type(list, f"{where}.spec.{key}")
    return items


def _check_container(container: Any, where: str, key: str, index: int) -> None:
    """One container of `{where}.spec.{key}[{index}]` (the path is built only for a message)."""
    if not isinstance(container, dict):
        _wrong_type(dict, f"{where}.spec.{key}[{index}]")
    env = container.get("env")
    if env is not None:
        if not isinstance(env, list):
            _wrong_type(list, f"{where}.spec.{key}[{index}].env")
        if not _OBJECTS.issuperset(map(type, env)):
            for position, item in enumerate(env):
                if not isinstance(item, dict):
                    _wrong_type(dict, f"{where}.spec.{key}[{index}].env[{position}]")
    resources = container.get("resources")
    if resources is None:
        return
    if not isinstance(resources, dict):
        _wrong_type(dict, f"{where}.spec.{key}[{index}].resources")
    for section in ("limits", "requests"):
        amounts = resources.get(section)
        if amounts is None:
            continue
        if not isinstance(amounts, dict):
            _wrong_type(dict, f"{where}.spec.{key}[{index}].resources.{section}")
        if _QUANTITIES.issuperset(map(type, amounts.values())):
            continue
        for name, amount in amounts.items():
            if isinstance(amount, bool) or not isinstance(amount, (str, int, float)):
                raise ObjectOutOfBounds(
                    f"{where}.spec.{key}[{index}].resources.{section}[{str(name)[:63]!r}] must be a quantity"
                )
    claims = resources.get("claims")
    if claims is not None and not isinstance(claims, list):
        _wrong_type(list, f"{where}.spec.{key}[{index}].resources.claims")
