"""Equal parts of slimmed pods are held once (webhook/cluster/shared_parts.py), and the pods read the same."""

from __future__ import annotations

import copy
import datetime
from decimal import Decimal
from typing import Any

import orjson

from webhook.cluster.shared_parts import SharedParts, amount, constant
from webhook.cluster.slimming import slim_pod


def _pod(name: str, node: str, gpus: str = "1") -> dict[str, Any]:
    resources = {"limits": {"cpu": "4", "nvidia.com/gpu": gpus}, "requests": {"cpu": "4", "nvidia.com/gpu": gpus}}
    return orjson.loads(orjson.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}", "labels": {"app": "train"},
                     "annotations": {}, "creationTimestamp": "2026-11-01T00:00:00Z"},
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x", "resources": resources}],
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
        "status": {"phase": "Running", "startTime": "2026-11-01T00:00:00Z", "podIP": "10.0.0.1"},
    }))


def _plain(pod: dict[str, Any]) -> dict[str, Any]:
    """What slim_pod keeps, written out by hand (as it was before parts were shared)."""
    meta, spec = pod["metadata"], pod["spec"]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "labels", "annotations", "creationTimestamp")},
        "spec": {"nodeName": spec["nodeName"], "tolerations": spec["tolerations"],
                 "containers": [{"name": c["name"], "resources": c["resources"]} for c in spec["containers"]]},
        "status": {"phase": pod["status"]["phase"], "startTime": pod["status"]["startTime"]},
    }


def test_replicas_hold_their_equal_parts_once_and_read_as_before() -> None:
    first, second = _pod("a", "n1"), _pod("b", "n1")
    slim_a, slim_b = slim_pod(copy.deepcopy(first)), slim_pod(copy.deepcopy(second))
    assert slim_a == _plain(first) and slim_b == _plain(second)
    assert orjson.dumps(slim_a) == orjson.dumps(_plain(first))  # the same JSON, key order included
    assert slim_a["spec"]["containers"] is slim_b["spec"]["containers"]
    assert slim_a["spec"]["tolerations"] is slim_b["spec"]["tolerations"]
    assert slim_a["metadata"]["labels"] is slim_b["metadata"]["labels"]
    assert slim_a["status"] is slim_b["status"]
    assert slim_a["spec"]["nodeName"] is slim_b["spec"]["nodeName"]
    assert slim_a["metadata"] is not slim_b["metadata"] and slim_a is not slim_b


def test_different_parts_stay_apart() -> None:
    one, eight = slim_pod(_pod("c", "n2", "1")), slim_pod(_pod("d", "n2", "8"))
    assert one["spec"]["containers"] is not eight["spec"]["containers"]
    assert eight["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"


def test_a_pod_never_holds_one_object_in_two_places() -> None:
    pod = _pod("e", "n3")
    pod["metadata"]["labels"] = {}
    slim = slim_pod(pod)
    assert slim["metadata"]["labels"] == slim["metadata"]["annotations"] == {}
    assert slim["metadata"]["labels"] is not slim["metadata"]["annotations"]
    copied = copy.deepcopy(slim)
    copied["metadata"]["labels"]["x"] = "1"
    assert copied["metadata"]["annotations"] == {}


def test_the_kept_part_is_not_the_callers_object() -> None:
    parts = SharedParts()
    labels = {"app": "train"}
    kept = parts.part("labels", labels)
    assert kept == labels and kept is not labels
    labels["app"] = "changed later by whoever made it"
    assert parts.part("labels", {"app": "train"}) is kept and kept == {"app": "train"}


def test_what_json_cannot_tell_apart_is_kept_as_it_is() -> None:
    parts = SharedParts()
    dated = {"since": datetime.date(2026, 11, 1)}
    assert parts.part("labels", dated) is dated
    assert parts.part("labels", {"n": 1}) == {"n": 1} and type(parts.part("labels", {"n": 1.0})["n"]) is float
    assert parts.part("x", [True])[0] is True and parts.part("x", [1])[0] == 1 and parts.part("x", [1])[0] is not True


def test_the_table_is_bounded() -> None:
    parts = SharedParts(max_kept=4)
    for i in range(10):
        parts.part("labels", {"app": str(i)})
    assert len(parts) <= 4


def test_amounts_and_constants_are_held_once_and_keep_their_text() -> None:
    one = amount(Decimal("1"))
    assert amount(Decimal(1)) is one and amount(None) is None
    assert str(amount(Decimal("1.0"))) == "1.0" and amount(Decimal("1.0")) is not one
    parts = constant((("main", Decimal("0.5")),))
    assert constant((("main", Decimal("0.5")),)) is parts
    assert constant((("main", Decimal("0.50")),)) is not parts
    assert constant(("nvidia-h100-80gb",)) is constant(("nvidia-h100-80gb",))


def test_a_part_changed_in_place_is_found() -> None:
    """What the suite asks after each module (tests/conftest.py): a stored pod's part changed in place would be
    every pod's that shares it."""
    parts = SharedParts()
    tolerations = parts.part("spec.tolerations", [{"key": "nvidia.com/gpu", "operator": "Exists"}])
    parts.part("metadata.labels", {"app": "train"})
    assert parts.changed() == []
    tolerations[0]["operator"] = "Equal"
    assert parts.changed() == ["spec.tolerations"]
