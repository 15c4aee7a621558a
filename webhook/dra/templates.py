"""Who creates the ResourceClaimTemplates a DRA-rendered pod names: the mutating webhook, at admission.

The pod names a template in its own namespace; the API server's resource-claim controller makes the
pod's ResourceClaim from it, so the template must exist before the pod is scheduled. KGWE creates it
while admitting the pod, because only then is it known, and only then can a failure be reported:

- never on `dryRun` requests and never in audit mode (no patch is returned there): admission stays
  free of side effects where Kubernetes asks for that; `kgwe review` and the `creates` of the outcome
  show what would be created;
- idempotent: the name is a hash of the content; on `409 AlreadyExists` the template there is read back
  and used only when it holds the same request (a namespace's users can create templates, and compute
  the name); recently created names are remembered for `REMEMBER_SECONDS` to save the round trips;
- bounded by the admission deadline;
- when the template (or a gang's ComputeDomain, webhook/dra/compute_domain.py) cannot be created the
  mutation is withdrawn (no patch, a warning): the pod is
  then refused by `/validate` as not mutated, and the user creates it again, instead of a pod that
  waits forever for a template that does not exist.

Templates are labelled `app.kubernetes.io/managed-by: kgwe`. They are shared by every pod with the same
request in the namespace and are not deleted with a pod (another may name it an instant later): the
leader removes those no unfinished pod has named for a grace period longer than `REMEMBER_SECONDS`
(webhook/dra/garbage.py), and KGWE recreates a template on the next admission that needs it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Protocol

from webhook.admission.outcome import Outcome
from webhook.admission.request import AdmissionRequest
from webhook.dra.compute_domain import API_VERSION as COMPUTE_DOMAIN_API
from webhook.dra.compute_domain import KIND as COMPUTE_DOMAIN_KIND
from webhook.dra.compute_domain import PLURAL as COMPUTE_DOMAIN_PLURAL
from webhook.dra.render import API_VERSION
from webhook.dra_rendering import DraRendering

if TYPE_CHECKING:
    from webhook.config import Config


class TemplateRuntime(Protocol):
    """What template creation reads of the runtime: its writer (None offline) and the configuration."""

    @property
    def claim_templates(self) -> TemplateWriter | None: ...

    @property
    def config(self) -> Config: ...

log = logging.getLogger("kgwe.dra")
REMEMBER_SECONDS = 300.0
REMEMBER_MAX = 4096
# kind -> (apiVersion, resource) of what the mutating webhook creates.
COLLECTIONS = {
    "ResourceClaimTemplate": (API_VERSION, "resourceclaimtemplates"),
    COMPUTE_DOMAIN_KIND: (COMPUTE_DOMAIN_API, COMPUTE_DOMAIN_PLURAL),
}


class TemplateError(RuntimeError):
    pass


class TemplateWriter(Protocol):
    def create(self, template: dict[str, Any], deadline: float | None) -> None:
        """Create `template` (AlreadyExists counts as success); raise TemplateError otherwise."""


class KubeTemplateWriter:
    """Creates templates (`create` on resourceclaimtemplates.resource.k8s.io) and gangs' ComputeDomains
    (`create` on computedomains.resource.nvidia.com) through the API server."""

    def __init__(self, api: Any, connect_timeout: float = 1.0) -> None:
        self.api = api  # webhook.cluster.kube_json.KubeJson
        self.connect_timeout = connect_timeout
        self._known: OrderedDict[tuple[str, str, str], float] = OrderedDict()
        self._lock = threading.Lock()

    def _remembered(self, key: tuple[str, str, str]) -> bool:
        with self._lock:
            stamp = self._known.get(key)
            return stamp is not None and time.monotonic() - stamp < REMEMBER_SECONDS

    def _remember(self, key: tuple[str, str, str]) -> None:
        with self._lock:
            self._known[key] = time.monotonic()
            self._known.move_to_end(key)
            while len(self._known) > REMEMBER_MAX:
                self._known.popitem(last=False)

    def create(self, template: dict[str, Any], deadline: float | None) -> None:
        from kubernetes.client.exceptions import ApiException

        meta = template["metadata"]
        key = (str(template.get("kind")), str(meta["namespace"]), str(meta["name"]))
        if self._remembered(key):
            return
        remaining = _left(deadline, "no time left before the admission deadline")
        kind = str(template.get("kind") or "ResourceClaimTemplate")
        api_version, plural = COLLECTIONS[kind]
        path = f"/apis/{api_version}/namespaces/{key[1]}/{plural}"
        what = f"creating {kind} {key[1]}/{key[2]}"
        try:
            self.api.request("POST", path, body=template, timeout=(min(self.connect_timeout, remaining), remaining))
        except ApiException as exc:
            if exc.status != 409:
                raise TemplateError(f"{what}: {exc.status} {exc.reason}") from exc
            self._check_existing(f"{path}/{key[2]}", template, what, deadline)
        except Exception as exc:  # urllib3 timeouts and connection errors: the same answer for the user
            raise TemplateError(f"{what}: {exc}") from exc
        self._remember(key)

    def _check_existing(self, path: str, template: dict[str, Any], what: str, deadline: float | None) -> None:
        """A ResourceClaimTemplate already under KGWE's name must hold KGWE's request.

        The name is a hash of the content, which anyone can compute, and the users of a namespace may create
        templates in it: one made first under that name (8 GPUs of any type, say) would otherwise be taken
        for KGWE's, and the pod, charged for what KGWE rendered, would get what the template asks."""
        if template.get("kind") != "ResourceClaimTemplate":
            return
        remaining = _left(deadline, f"{what}: no time left to read the template already there")
        try:
            existing = self.api.request("GET", path, timeout=(min(self.connect_timeout, remaining), remaining))
        except Exception as exc:  # gone again, forbidden, timed out: not known to be KGWE's
            raise TemplateError(f"{what}: the template already there could not be read: {exc}") from exc
        if not isinstance(existing, dict) or _claim_spec(existing) != _claim_spec(template):
            raise TemplateError(
                f"{what}: a template of that name exists with another request, not written by KGWE; "
                "an administrator must delete it"
            )


def _left(deadline: float | None, late: str) -> float:
    """Seconds left before `deadline` (10 without one); TemplateError(`late`) when none are."""
    remaining = 10.0 if deadline is None else deadline - time.monotonic()
    if remaining <= 0:
        raise TemplateError(late)
    return remaining


def _claim_spec(template: Any) -> Any:
    """What a ResourceClaimTemplate asks for (`spec.spec`, the claims' spec), as the API server and KGWE both
    write it: without empty values, which the server may spell where KGWE leaves a field out (an empty list,
    `null`). The claims' own `spec.metadata` (the server writes `{}` there) asks for no device."""
    spec = template.get("spec") if isinstance(template, dict) else None
    return _without_empty(spec.get("spec") if isinstance(spec, dict) else None)


def _without_empty(value: Any) -> Any:
    if isinstance(value, dict):
        kept = {key: _without_empty(item) for key, item in value.items()}
        return {key: item for key, item in kept.items() if item not in (None, {}, [])}
    if isinstance(value, list):
        return [_without_empty(item) for item in value]
    return value


def ensure_claim_templates(
    runtime: TemplateRuntime,
    request: AdmissionRequest,
    rendering: DraRendering,
    outcome: Outcome,
    deadline: float | None,
) -> Outcome:
    """Create the templates `rendering` names (see the module docstring), or withdraw the mutation."""
    templates = rendering.creates
    outcome.creates = templates
    writer: TemplateWriter | None = runtime.claim_templates
    config = runtime.config
    if writer is None or request.dry_run or config.mode == "audit" or not config.dra.create_templates:
        return outcome
    for template in templates:
        try:
            writer.create(template, deadline)
        except TemplateError as exc:
            log.warning("pod %s/%s: %s", request.namespace, request.name or "(generated)", exc)
            # Warnings are cut at 120 characters: what failed and what to do come first.
            what = "gang's ComputeDomain" if template.get("kind") == COMPUTE_DOMAIN_KIND else "pod's claim template"
            return Outcome(
                warnings=[f"KGWE could not create the {what}; create the pod again ({exc})"],
                object=request.object,
            )
    return outcome
