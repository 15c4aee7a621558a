"""The CRDs accept every example custom resource and refuse malformed ones.

The openAPIV3Schema is checked with jsonschema (OpenAPI 3.0 schemas are draft 4: boolean
exclusiveMinimum), and the x-kubernetes-validations rules with cel-python, as the API server would.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from chart_support import REPO, Cel, example_documents

KINDS = {
    "HardwareProfile": ("hardwareprofiles", "hwp"),
    "TenantQuota": ("tenantquotas", "tq"),
    "GPUPolicy": ("gpupolicies", "gpup"),
    "GangLedger": ("gangledgers", "gangl"),
    "MIGStrategy": ("migstrategies", "migs"),
}
# The audit's reports (audit.reportFormat: openreports): the published OpenReports API, not KGWE's own.
OPENREPORTS_KINDS = {
    "Report": ("reports", "reps", "Namespaced"),
    "ClusterReport": ("clusterreports", "creps", "Cluster"),
}
# Objects KGWE writes for itself (one spec, one writer protocol): no status subresource.
STATELESS_KINDS = {"GangLedger"}
EXAMPLE_DIRECTORIES = (REPO / "examples" / "cluster", REPO / "examples" / "policies")


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    return dict(version["schema"]["openAPIV3Schema"])


def _examples() -> list[tuple[Path, dict[str, Any]]]:
    return [(path, doc) for path, doc in example_documents(*EXAMPLE_DIRECTORIES)
            if doc.get("apiVersion") == "kgwe.io/v1alpha1"]


def _cel_rules(schema: dict[str, Any], value: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """(path, rule, self) for every x-kubernetes-validations rule that applies to a part of `value`."""
    if value is None:
        return
    for rule in schema.get("x-kubernetes-validations", []):
        yield path, rule["rule"], value
    if isinstance(value, dict):
        for key, child in value.items():
            child_schema = schema.get("properties", {}).get(key)
            if child_schema is not None:
                yield from _cel_rules(child_schema, child, f"{path}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for index, child in enumerate(value):
            yield from _cel_rules(schema["items"], child, f"{path}[{index}]")


def _problems(crd: dict[str, Any], obj: dict[str, Any], cel: Cel) -> list[str]:
    schema = _schema(crd)
    found = [error.message for error in jsonschema.Draft4Validator(schema).iter_errors(obj)]
    found.extend(
        f"{path}: {rule}" for path, rule, value in _cel_rules(schema, obj) if not cel.check(rule, self=value)
    )
    return found


def test_names_scope_and_subresources(chart_crds: dict[str, dict[str, Any]]) -> None:
    assert set(chart_crds) == set(KINDS) | set(OPENREPORTS_KINDS)
    for kind, (plural, short) in KINDS.items():
        spec = chart_crds[kind]["spec"]
        assert chart_crds[kind]["metadata"]["name"] == f"{plural}.kgwe.io"
        assert spec["group"] == "kgwe.io"
        assert spec["scope"] == "Cluster"
        assert spec["names"]["plural"] == plural and spec["names"]["shortNames"] == [short]
        (version,) = spec["versions"]
        assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
        assert version["additionalPrinterColumns"][-1]["jsonPath"] == ".metadata.creationTimestamp"
        if kind in STATELESS_KINDS:
            assert "subresources" not in version
            continue
        assert version["subresources"] == {"status": {}}
        assert "status" in version["schema"]["openAPIV3Schema"]["properties"]


def test_printer_columns_point_at_schema_fields(chart_crds: dict[str, dict[str, Any]]) -> None:
    for kind, crd in chart_crds.items():
        (version,) = crd["spec"]["versions"]
        for column in version["additionalPrinterColumns"]:
            path = column["jsonPath"].split("[")[0].strip(".").split(".")
            if path[0] == "metadata":
                continue
            node = version["schema"]["openAPIV3Schema"]
            for part in path:
                assert part in node.get("properties", {}), f"{kind} column {column['name']}: no field {part}"
                node = node["properties"][part]
                node = node.get("items", node) if node.get("type") == "array" else node


def test_status_shapes(chart_crds: dict[str, dict[str, Any]]) -> None:
    def status(kind: str) -> dict[str, Any]:
        return dict(_schema(chart_crds[kind])["properties"]["status"]["properties"])

    assert status("HardwareProfile")["available"]["items"]["properties"].keys() >= {"acceleratorType", "gpus", "total"}
    assert {"used", "waiting"} <= status("TenantQuota").keys()
    assert status("GPUPolicy")["conditions"]["x-kubernetes-list-map-keys"] == ["type"]


def _walk(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for key, child in schema.get("properties", {}).items():
        yield from _walk(child, f"{path}.{key}")
    if isinstance(schema.get("items"), dict):
        yield from _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{path}{{}}")


def test_schemas_are_structural(chart_crds: dict[str, dict[str, Any]]) -> None:
    # The API server refuses a CRD whose schema is not structural: every node typed (int-or-string and
    # preserve-unknown-fields aside), no $ref, properties and additionalProperties never together.
    for kind, crd in chart_crds.items():
        for path, node in _walk(_schema(crd)):
            assert "$ref" not in node, f"{kind}{path}"
            assert not ("properties" in node and "additionalProperties" in node), f"{kind}{path}"
            assert "type" in node or node.get("x-kubernetes-int-or-string") or node.get(
                "x-kubernetes-preserve-unknown-fields"), f"{kind}{path} has no type"


def test_free_form_params_keep_unknown_fields(chart_crds: dict[str, dict[str, Any]]) -> None:
    params = _schema(chart_crds["GPUPolicy"])["properties"]["spec"]["properties"]["params"]
    assert params["x-kubernetes-preserve-unknown-fields"] is True


def test_there_are_examples_of_every_kind() -> None:
    kinds = {doc["kind"] for _, doc in _examples()}
    assert {"HardwareProfile", "TenantQuota"} <= kinds


@pytest.mark.parametrize(("path", "obj"), _examples(), ids=lambda v: v.name if isinstance(v, Path) else None)
def test_every_example_custom_resource_is_accepted(
    chart_crds: dict[str, dict[str, Any]], cel: Cel, path: Path, obj: dict[str, Any]
) -> None:
    assert obj["kind"] in chart_crds, f"{path}: no CRD for {obj['kind']}"
    assert _problems(chart_crds[obj["kind"]], obj, cel) == []


HWP: dict[str, Any] = {
    "apiVersion": "kgwe.io/v1alpha1", "kind": "HardwareProfile", "metadata": {"name": "p"},
    "spec": {"acceleratorTypes": ["nvidia-l4-24gb"], "sharing": {"mode": "mps", "gpuFraction": 0.25}},
}
TQ: dict[str, Any] = {
    "apiVersion": "kgwe.io/v1alpha1", "kind": "TenantQuota", "metadata": {"name": "q"},
    "spec": {"tenant": "a", "namespaces": ["a"], "limits": [{"acceleratorType": "nvidia-h100-80gb", "gpus": 8}]},
}
POLICY: dict[str, Any] = {
    "apiVersion": "kgwe.io/v1alpha1", "kind": "GPUPolicy", "metadata": {"name": "g"},
    "spec": {
        "enforcementAction": "Warn",
        "match": {"namespaces": ["team-a"], "namespaceSelector": {"matchLabels": {"gpu": "yes"}}},
        "matchConditions": [{"name": "has-gpu", "expression": "true"}],
        "validations": [{"expression": "true", "message": "m"}],
        "rego": {"module": "package kgwe.policy.x\n"},
        "params": {"maxGPUs": 8, "nested": {"anything": ["goes"]}},
    },
}
MIGS: dict[str, Any] = {
    "apiVersion": "kgwe.io/v1alpha1", "kind": "MIGStrategy", "metadata": {"name": "m"},
    "spec": {"nodeSelector": {"matchLabels": {"pool": "mig"}}, "preferredProfiles": [{"profile": "1g.10gb",
             "share": 0.5}], "rebalanceInterval": "10m", "minUtilization": 0.2, "mode": "apply"},
}


def _with(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    *parents, last = path.split(".")
    node = changed
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is None:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return changed


def test_well_formed_objects_are_accepted(chart_crds: dict[str, dict[str, Any]], cel: Cel) -> None:
    for obj in (HWP, TQ, POLICY, MIGS):
        assert _problems(chart_crds[obj["kind"]], obj, cel) == []


@pytest.mark.parametrize(("base", "path", "value"), [
    (HWP, "spec.acceleratorTypes", []),
    (HWP, "spec.acceleratorTypes", ["NVIDIA H100"]),
    (HWP, "spec.sharing.mode", "shared"),
    (HWP, "spec.sharing.gpuFraction", 0),
    (HWP, "spec.sharing.gpuFraction", 1.5),
    (HWP, "spec.sharing.gpuFraction", None),
    (HWP, "spec.sharing", {"mode": "mig"}),
    (HWP, "spec.sharing", {"mode": "exclusive", "migProfile": "1g.10gb"}),
    (HWP, "spec.pricePerGPUHour", "4,50"),
    (HWP, "spec.gpuMemory", "ten gigs"),
    (HWP, "spec.resources", {"cpu": {"default": "lots"}}),
    (HWP, "spec.resources", {"cpu": {}}),
    (HWP, "spec.resources", {"memory": {"max": True}}),
    (HWP, "spec.queue", "Not A Queue"),
    (TQ, "spec.tenant", None),
    (TQ, "spec.namespaces", None),
    (TQ, "spec.limits.0", {"gpus": 4}),
    (TQ, "spec.limits.0", {"acceleratorType": "nvidia-h100-80gb", "profile": "premium-h100", "gpus": 4}),
    (TQ, "spec.limits.0.gpuMemory", "lots"),
    (POLICY, "spec.enforcementAction", "Block"),
    (POLICY, "spec.matchConditions", [{"expression": "true"}]),
    (POLICY, "spec.match.operations", ["DELETE"]),
    (POLICY, "spec.validations.0.expression", None),
    (POLICY, "spec.rego", {}),
    (MIGS, "spec.mode", "sometimes"),
    (MIGS, "spec.rebalanceInterval", "ten minutes"),
    (MIGS, "spec.minUtilization", 1.5),
    (MIGS, "spec.preferredProfiles.0.share", 0),
    (MIGS, "spec.preferredProfiles.0.profile", "small"),
])
def test_malformed_objects_are_refused(
    chart_crds: dict[str, dict[str, Any]], cel: Cel, base: dict[str, Any], path: str, value: Any
) -> None:
    assert _problems(chart_crds[base["kind"]], _with(base, path, value), cel) != []


def test_the_openreports_crds_accept_what_the_audit_writes(chart_crds: dict[str, dict[str, Any]], cel: Cel) -> None:
    from webhook.audit.findings import Finding
    from webhook.audit.formats import OPENREPORTS
    from webhook.audit.reports import render_reports

    for kind, (plural, short, scope) in OPENREPORTS_KINDS.items():
        crd = chart_crds[kind]
        assert crd["metadata"]["name"] == f"{plural}.openreports.io"
        assert (crd["spec"]["group"], crd["spec"]["scope"]) == ("openreports.io", scope)
        assert crd["spec"]["names"]["shortNames"] == [short]
        (version,) = crd["spec"]["versions"]
        assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    findings = [
        Finding("policy", "team-a", "root", "kgwe.admission.privileged", "deny", "high", "privileged", uid="u-1"),
        Finding("policy", "team-a", "old", "kgwe-workload-admission", "validate", "high", "spec.template: ...",
                kind="Deployment", api_version="apps/v1"),
        Finding("quota", "", "", "TenantQuota/team-a", "gpus", "high", "4 of 2 GPUs", tenant="team-a",
                quota="team-a"),
    ]
    reports = render_reports(findings, lambda _f: 1_800_000_000.0, (), OPENREPORTS)
    assert [r["kind"] for r in reports] == ["Report", "ClusterReport"]
    for report in reports:
        assert _problems(chart_crds[report["kind"]], report, cel) == []
        assert _pruned(_schema(chart_crds[report["kind"]]), report) == report, "the API server would drop a field"


def _pruned(schema: dict[str, Any], value: Any) -> Any:
    """`value` as the API server stores it: fields the structural schema does not name are dropped."""
    if schema.get("x-kubernetes-preserve-unknown-fields") or not isinstance(value, (dict, list)):
        return value
    if isinstance(value, list):
        return [_pruned(schema.get("items", {}), item) for item in value]
    if "additionalProperties" in schema:
        return {k: _pruned(schema["additionalProperties"], v) for k, v in value.items()}
    properties = schema.get("properties", {})
    if schema.get("type") == "object" and not properties:
        return value  # metadata: the API server's own
    return {k: _pruned(properties[k], v) for k, v in value.items() if k in properties}
