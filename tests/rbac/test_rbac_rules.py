"""Kubernetes RBAC rules over Role/ClusterRole/RoleBinding/ClusterRoleBinding objects, outside a cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

from policies.rbac.evaluator import RbacEvaluator, check_use, refusal_message

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "cluster"
RBAC = "rbac.authorization.k8s.io/v1"


def example_objects() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / "rbac.yaml").read_text()) if d]


def user(name: str, *groups: str, **extra: list[str]) -> dict[str, Any]:
    return {"username": name, "uid": f"uid-{name}", "groups": list(groups), "extra": extra}


def cluster_role(name: str, rules: list[dict[str, Any]], labels: dict[str, str] | None = None,
                 aggregate: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    metadata = {"name": name, "labels": labels or {}}
    role: dict[str, Any] = {"apiVersion": RBAC, "kind": "ClusterRole", "metadata": metadata, "rules": rules}
    if aggregate is not None:
        role["aggregationRule"] = {"clusterRoleSelectors": aggregate}
    return role


def binding(kind: str, name: str, role_kind: str, role: str, subjects: list[dict[str, Any]],
            namespace: str | None = None) -> dict[str, Any]:
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": RBAC, "kind": kind, "metadata": metadata,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role}, "subjects": subjects}


@pytest.fixture
def examples() -> RbacEvaluator:
    return RbacEvaluator(example_objects())


def test_authenticated_users_may_use_the_ordinary_profiles(examples: RbacEvaluator) -> None:
    alice = user("alice", "system:authenticated")
    assert examples.can_use(alice, "hardwareprofiles", "premium-h100", "team-a")
    assert examples.can_use(alice, "acceleratortypes", "nvidia-h100-80gb", "team-a")
    # system:authenticated is implied for any named user, as the API server's authenticators add it.
    assert examples.can_use(user("bob"), "hardwareprofiles", "shared-l4", "default")


def test_restricted_profile_refused_with_a_message_naming_it(examples: RbacEvaluator) -> None:
    alice = user("alice", "system:authenticated")
    assert not examples.can_use(alice, "hardwareprofiles", "nvl72", "ml-research")
    assert refusal_message(alice, "hardwareprofiles", "nvl72") == (
        'user alice may not use hardware profile "nvl72" (needs verb "use" on hardwareprofiles.kgwe.io/nvl72)'
    )
    assert refusal_message(alice, "acceleratortypes", "nvidia-gb200-186gb") == (
        'user alice may not use accelerator type "nvidia-gb200-186gb" '
        '(needs verb "use" on acceleratortypes.kgwe.io/nvidia-gb200-186gb)'
    )


def test_allowed_by_group_in_the_role_bindings_namespace_only(examples: RbacEvaluator) -> None:
    researcher = user("carol", "system:authenticated", "ml-researchers")
    assert examples.can_use(researcher, "hardwareprofiles", "nvl72", "ml-research")
    assert not examples.can_use(researcher, "hardwareprofiles", "nvl72", "team-a")


def test_allowed_by_service_account(examples: RbacEvaluator) -> None:
    trainer = user("system:serviceaccount:ml-research:trainer", "system:serviceaccounts",
                   "system:serviceaccounts:ml-research", "system:authenticated")
    assert examples.can_use(trainer, "hardwareprofiles", "nvl72", "ml-research")
    namesake = user("system:serviceaccount:team-a:trainer")
    assert not examples.can_use(namesake, "hardwareprofiles", "nvl72", "ml-research")
    other = user("system:serviceaccount:ml-research:default")
    assert not examples.can_use(other, "hardwareprofiles", "nvl72", "ml-research")


def test_service_account_groups_are_derived_from_the_username() -> None:
    evaluator = RbacEvaluator([
        cluster_role("nvl72", [{"apiGroups": ["kgwe.io"], "resources": ["hardwareprofiles"],
                                "resourceNames": ["nvl72"], "verbs": ["use"]}]),
        binding("RoleBinding", "all-sas", "ClusterRole", "nvl72",
                [{"kind": "Group", "name": "system:serviceaccounts:ml-research"}], namespace="ml-research"),
        # A ServiceAccount subject without a namespace means the binding's namespace.
        binding("RoleBinding", "default-sa", "ClusterRole", "nvl72",
                [{"kind": "ServiceAccount", "name": "runner"}], namespace="batch"),
    ])
    # Groups missing from userInfo are added as Kubernetes' service-account authenticator adds them.
    assert evaluator.can_use(user("system:serviceaccount:ml-research:anyone"), "hardwareprofiles", "nvl72",
                             "ml-research")
    assert evaluator.can_use(user("system:serviceaccount:batch:runner"), "hardwareprofiles", "nvl72", "batch")
    assert not evaluator.can_use(user("system:serviceaccount:other:runner"), "hardwareprofiles", "nvl72", "batch")


def test_allowed_by_wildcards() -> None:
    evaluator = RbacEvaluator([
        cluster_role("everything", [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
        cluster_role("any-profile", [{"apiGroups": ["kgwe.io"], "resources": ["hardwareprofiles"], "verbs": ["*"]}]),
        cluster_role("h100-only", [{"apiGroups": ["kgwe.io"], "resources": ["*"], "verbs": ["use"],
                                    "resourceNames": ["nvidia-h100-80gb"]}]),
        binding("ClusterRoleBinding", "admins", "ClusterRole", "everything", [{"kind": "User", "name": "root"}]),
        binding("ClusterRoleBinding", "ops", "ClusterRole", "any-profile", [{"kind": "Group", "name": "ops"}]),
        binding("ClusterRoleBinding", "h100", "ClusterRole", "h100-only", [{"kind": "User", "name": "dana"}]),
    ])
    assert evaluator.can_use(user("root"), "hardwareprofiles", "nvl72", "x")
    assert evaluator.allowed(user("root"), "delete", "", "pods", "p", "x")
    assert evaluator.can_use(user("erin", "ops"), "hardwareprofiles", "nvl72", "x")
    assert not evaluator.can_use(user("erin", "ops"), "acceleratortypes", "nvidia-h100-80gb", "x")
    assert evaluator.can_use(user("dana"), "acceleratortypes", "nvidia-h100-80gb", "x")
    # resourceNames has no wildcard and `*` in resources does not widen it.
    assert not evaluator.can_use(user("dana"), "acceleratortypes", "nvidia-h200-141gb", "x")


def test_verb_group_and_resource_must_all_match() -> None:
    evaluator = RbacEvaluator([
        cluster_role("readers", [{"apiGroups": ["kgwe.io"], "resources": ["hardwareprofiles"],
                                  "verbs": ["get", "list"]}]),
        cluster_role("wrong-group", [{"apiGroups": [""], "resources": ["hardwareprofiles"], "verbs": ["use"]}]),
        binding("ClusterRoleBinding", "r", "ClusterRole", "readers", [{"kind": "User", "name": "frank"}]),
        binding("ClusterRoleBinding", "w", "ClusterRole", "wrong-group", [{"kind": "User", "name": "frank"}]),
    ])
    assert not evaluator.can_use(user("frank"), "hardwareprofiles", "premium-h100", "x")
    assert evaluator.allowed(user("frank"), "get", "kgwe.io", "hardwareprofiles", "premium-h100", "x")


def test_role_binding_to_a_cluster_role_grants_in_its_namespace() -> None:
    evaluator = RbacEvaluator([
        cluster_role("gb200", [{"apiGroups": ["kgwe.io"], "resources": ["acceleratortypes"],
                                "resourceNames": ["nvidia-gb200-186gb"], "verbs": ["use"]}]),
        binding("RoleBinding", "gb200", "ClusterRole", "gb200", [{"kind": "User", "name": "gina"}], namespace="hpc"),
        # A RoleBinding cannot reach a Role of another namespace.
        {"apiVersion": RBAC, "kind": "Role", "metadata": {"name": "local", "namespace": "other"},
         "rules": [{"apiGroups": ["kgwe.io"], "resources": ["hardwareprofiles"], "verbs": ["use"]}]},
        binding("RoleBinding", "cross", "Role", "local", [{"kind": "User", "name": "gina"}], namespace="hpc"),
    ])
    assert evaluator.can_use(user("gina"), "acceleratortypes", "nvidia-gb200-186gb", "hpc")
    assert not evaluator.can_use(user("gina"), "acceleratortypes", "nvidia-gb200-186gb", "default")
    assert not evaluator.can_use(user("gina"), "hardwareprofiles", "nvl72", "hpc")


def test_aggregated_cluster_roles_collect_selected_rules() -> None:
    evaluator = RbacEvaluator([
        cluster_role("kgwe-users", [], aggregate=[{"matchLabels": {"kgwe.io/aggregate-to-users": "true"}}]),
        cluster_role("nvl72-part", [{"apiGroups": ["kgwe.io"], "resources": ["hardwareprofiles"],
                                     "resourceNames": ["nvl72"], "verbs": ["use"]}],
                     labels={"kgwe.io/aggregate-to-users": "true"}),
        cluster_role("unlabelled", [{"apiGroups": ["kgwe.io"], "resources": ["acceleratortypes"], "verbs": ["use"]}]),
        binding("ClusterRoleBinding", "users", "ClusterRole", "kgwe-users", [{"kind": "Group", "name": "hpc"}]),
    ])
    assert evaluator.can_use(user("hank", "hpc"), "hardwareprofiles", "nvl72", "x")
    assert not evaluator.can_use(user("hank", "hpc"), "acceleratortypes", "nvidia-h100-80gb", "x")


def test_anonymous_and_privileged_users(examples: RbacEvaluator) -> None:
    anonymous = {"username": "system:anonymous", "groups": ["system:unauthenticated"]}
    assert not examples.can_use(anonymous, "hardwareprofiles", "premium-h100", "team-a")
    assert examples.can_use(user("kubernetes-admin", "system:masters"), "hardwareprofiles", "nvl72", "team-a")


def test_check_use_counts_rbac_refusals(examples: RbacEvaluator) -> None:
    def refusals() -> float:
        return REGISTRY.get_sample_value("kgwe_admission_refusals_total", {"reason": "rbac"}) or 0.0

    before = refusals()
    assert check_use(examples, user("ivan"), "hardwareprofiles", "premium-h100", "team-a") is None
    message = check_use(examples, user("ivan"), "hardwareprofiles", "nvl72", "team-a")
    assert message is not None and '"nvl72"' in message
    assert refusals() == before + 1
