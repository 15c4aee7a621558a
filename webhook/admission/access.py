"""May the requester use a kgwe.io resource (a HardwareProfile, an AcceleratorType) in the request's
namespace (SPEC section 4): the RBAC question the RBAC gate and the claims gate both ask.

In a cluster a SubjectAccessReview answers (`authorizer`, may wait on the network); offline the cluster
directory's Roles and bindings do, evaluated in memory once per snapshot. An authorizer that fails is a
refusal, never an admission.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from policies.api import WouldBlock
from policies.rbac.evaluator import Authorizer, RbacEvaluator, Resource, refusal_message
from webhook.admission.facts import Problem
from webhook.admission.request import AdmissionRequest
from webhook.cluster.model import ClusterModel

log = logging.getLogger("kgwe.runtime")


@dataclass
class Access:
    """The RBAC checks of admission over `authorizer()` (None: the snapshot's own RBAC objects)."""

    authorizer: Callable[[], Authorizer | None]
    _evaluator: tuple[int, RbacEvaluator] | None = field(default=None, repr=False)

    @property
    def blocks_io(self) -> bool:
        """Whether a check may wait on the network (a SubjectAccessReview), not only on memory."""
        return self.authorizer() is not None

    def _authorizer(self, model: ClusterModel) -> Authorizer:
        authorizer = self.authorizer()
        if authorizer is not None:
            return authorizer
        cached = self._evaluator
        if cached is None or cached[0] != model.generation:
            evaluator = RbacEvaluator(obj for objects in model.rbac.values() for obj in objects)
            self._evaluator = cached = (model.generation, evaluator)
        return cached[1]

    def may_use(
        self, request: AdmissionRequest, model: ClusterModel, checks: list[tuple[Resource, str]],
        deadline: float | None, wait: bool,
    ) -> list[Problem]:
        """The refusals (reason `rbac`) of the `(resource, name)` pairs the requester may not use. With
        `wait=False`, raises `policies.api.WouldBlock` when an answer needs the network."""
        if not checks:
            return []
        authorizer = self._authorizer(model)
        user = request.user.as_dict()
        problems: list[Problem] = []
        for resource, name in checks:
            try:
                allowed = authorizer.can_use(user, resource, name, request.namespace, deadline=deadline, wait=wait)
            except WouldBlock:
                raise  # asked not to wait: the caller asks again where it may
            except Exception as exc:  # the authorizer's failure (timeout, API down): never an admission
                log.warning("RBAC check for %s/%s failed: %s", resource, name, exc)
                problems.append(("rbac", f"could not check RBAC for {resource}.kgwe.io/{name} ({exc}); try again"))
                continue
            if not allowed:
                problems.append(("rbac", refusal_message(user, resource, name)))
        return problems
