"""RBAC for hardware profiles and accelerator types: verb `use` on `hardwareprofiles.kgwe.io/<name>` and
`acceleratortypes.kgwe.io/<type id>` (SPEC section 3).

Two Authorizers answer the same question: RbacEvaluator here evaluates Role, ClusterRole, RoleBinding and
ClusterRoleBinding objects with Kubernetes' own rules (outside a cluster), SubjectAccessReviewer in
rbac_review asks the API server (in a cluster).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from policies.kernel.metrics import record_refusal
from policies.vocabulary import keys
from policies.vocabulary.objects import ObjectView
from policies.vocabulary.selectors import parse_selector

API_GROUP = keys.GROUP
USE = "use"
Resource = Literal["hardwareprofiles", "acceleratortypes"]

SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
AUTHENTICATED = "system:authenticated"
ANONYMOUS = "system:anonymous"
UNAUTHENTICATED = "system:unauthenticated"
# Kubernetes' privileged group: the API server allows it everything before RBAC is asked.
MASTERS = "system:masters"

_NOUNS = {"hardwareprofiles": "hardware profile", "acceleratortypes": "accelerator type"}


class AuthorizationUnavailable(RuntimeError):
    """The authorizer could not answer in time (API error or deadline): the webhook applies its failure behaviour."""


class Authorizer(Protocol):
    def can_use(
        self,
        user: Mapping[str, Any],
        resource: Resource,
        name: str,
        namespace: str,
        *,
        deadline: float | None = None,
        wait: bool = True,
    ) -> bool:
        """Whether `user` may use `resource`/`name` in `namespace`. With `wait=False`, raises
        `policies.api.WouldBlock` instead of asking the network (memory answers only)."""
        ...


def refusal_message(user: Mapping[str, Any], resource: Resource, name: str) -> str:
    username = user.get("username") or "(anonymous)"
    return (
        f'user {username} may not use {_NOUNS[resource]} "{name}" '
        f'(needs verb "{USE}" on {resource}.{API_GROUP}/{name})'
    )


def check_use(
    authorizer: Authorizer,
    user: Mapping[str, Any],
    resource: Resource,
    name: str,
    namespace: str,
    *,
    deadline: float | None = None,
) -> str | None:
    """None when allowed, else the refusal message (counted as an `rbac` refusal). Raises AuthorizationUnavailable."""
    if authorizer.can_use(user, resource, name, namespace, deadline=deadline):
        return None
    record_refusal("rbac")
    return refusal_message(user, resource, name)


def effective_groups(user: Mapping[str, Any]) -> set[str]:
    """The groups Kubernetes' authenticators attach: service-account groups and system:authenticated."""
    username = str(user.get("username") or "")
    groups = {str(g) for g in user.get("groups") or []}
    if username.startswith(SERVICE_ACCOUNT_PREFIX):
        namespace = username[len(SERVICE_ACCOUNT_PREFIX):].split(":", 1)[0]
        groups |= {"system:serviceaccounts", f"system:serviceaccounts:{namespace}"}
    if username and username != ANONYMOUS and UNAUTHENTICATED not in groups:
        groups.add(AUTHENTICATED)
    return groups


@dataclass(frozen=True)
class _Rule:
    verbs: frozenset[str]
    api_groups: frozenset[str]
    resources: frozenset[str]
    resource_names: frozenset[str]

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> _Rule:
        def field(key: str) -> frozenset[str]:
            return frozenset(str(v) for v in raw.get(key) or [])

        return cls(field("verbs"), field("apiGroups"), field("resources"), field("resourceNames"))

    def allows(self, verb: str, api_group: str, resource: str, subresource: str, name: str) -> bool:
        # Kubernetes' RuleAllows: each field matches by value or `*`; resourceNames has no wildcard.
        combined = f"{resource}/{subresource}" if subresource else resource
        return (
            ("*" in self.verbs or verb in self.verbs)
            and ("*" in self.api_groups or api_group in self.api_groups)
            and (
                "*" in self.resources
                or combined in self.resources
                or (bool(subresource) and f"*/{subresource}" in self.resources)
            )
            and (not self.resource_names or name in self.resource_names)
        )


def _name(obj: Mapping[str, Any]) -> str:
    return ObjectView(obj).name


def _namespace(obj: Mapping[str, Any]) -> str:
    return ObjectView(obj).namespace or "default"


def _subject_matches(subject: Mapping[str, Any], username: str, groups: set[str], binding_namespace: str) -> bool:
    kind = subject.get("kind")
    name = str(subject.get("name", ""))
    if kind == "User":
        return name == username
    if kind == "Group":
        return name in groups
    if kind == "ServiceAccount":
        # As in Kubernetes' appliesToUser: a subject without a namespace means the binding's namespace.
        sa_namespace = str(subject.get("namespace") or binding_namespace)
        return username == f"{SERVICE_ACCOUNT_PREFIX}{sa_namespace}:{name}"
    return False


class RbacEvaluator:
    """Kubernetes RBAC over a set of objects, as the API server's RBAC authorizer evaluates it."""

    def __init__(self, objects: Iterable[Mapping[str, Any]]) -> None:
        self._cluster_roles: dict[str, Mapping[str, Any]] = {}
        self._roles: dict[tuple[str, str], Mapping[str, Any]] = {}
        self._cluster_bindings: list[Mapping[str, Any]] = []
        self._bindings: dict[str, list[Mapping[str, Any]]] = {}
        for obj in objects:
            if not isinstance(obj, Mapping) or not str(obj.get("apiVersion", "")).startswith("rbac.authorization"):
                continue
            kind = obj.get("kind")
            if kind == "ClusterRole":
                self._cluster_roles[_name(obj)] = obj
            elif kind == "Role":
                self._roles[(_namespace(obj), _name(obj))] = obj
            elif kind == "ClusterRoleBinding":
                self._cluster_bindings.append(obj)
            elif kind == "RoleBinding":
                self._bindings.setdefault(_namespace(obj), []).append(obj)
        self._cluster_rules = {name: self._aggregate(name, set()) for name in self._cluster_roles}

    def _aggregate(self, name: str, seen: set[str]) -> tuple[_Rule, ...]:
        """A ClusterRole's own rules plus, with an aggregationRule, those of every ClusterRole it selects."""
        role = self._cluster_roles.get(name)
        if role is None or name in seen:
            return ()
        seen.add(name)
        rules = [_Rule.parse(r) for r in role.get("rules") or [] if isinstance(r, Mapping)]
        for raw in (role.get("aggregationRule") or {}).get("clusterRoleSelectors") or []:
            try:
                selector = parse_selector(raw)
            except ValueError:
                continue
            if selector is None:
                continue
            for other_name, other in sorted(self._cluster_roles.items()):
                if other_name != name and selector.matches(ObjectView(other).labels):
                    rules.extend(self._aggregate(other_name, seen))
        return tuple(dict.fromkeys(rules))

    def _role_rules(self, ref: Mapping[str, Any], binding_namespace: str | None) -> tuple[_Rule, ...]:
        name = str(ref.get("name", ""))
        if ref.get("kind") == "ClusterRole":
            return self._cluster_rules.get(name, ())
        if ref.get("kind") == "Role" and binding_namespace is not None:
            role = self._roles.get((binding_namespace, name))
            if role is not None:
                return tuple(_Rule.parse(r) for r in role.get("rules") or [] if isinstance(r, Mapping))
        return ()

    def allowed(
        self,
        user: Mapping[str, Any],
        verb: str,
        api_group: str,
        resource: str,
        name: str,
        namespace: str,
        subresource: str = "",
    ) -> bool:
        username = str(user.get("username") or "")
        groups = effective_groups(user)
        if MASTERS in groups:
            return True
        candidates: list[tuple[Mapping[str, Any], str | None, str]] = [
            (b, None, "") for b in self._cluster_bindings
        ]
        if namespace:
            # A RoleBinding grants only in its own namespace, also when it refers to a ClusterRole.
            candidates += [(b, namespace, namespace) for b in self._bindings.get(namespace, [])]
        for binding, role_namespace, binding_namespace in candidates:
            subjects = [s for s in binding.get("subjects") or [] if isinstance(s, Mapping)]
            if not any(_subject_matches(s, username, groups, binding_namespace) for s in subjects):
                continue
            rules = self._role_rules(binding.get("roleRef") or {}, role_namespace)
            if any(rule.allows(verb, api_group, resource, subresource, name) for rule in rules):
                return True
        return False

    def can_use(
        self,
        user: Mapping[str, Any],
        resource: Resource,
        name: str,
        namespace: str,
        *,
        deadline: float | None = None,
        wait: bool = True,  # memory only: it never waits
    ) -> bool:
        return self.allowed(user, USE, API_GROUP, resource, name, namespace)
