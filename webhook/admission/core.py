"""The admission core: review in, outcome out. No HTTP here; the server and `kgwe review` both call it.

Data flows one way, one module per stage:

    decode            webhook/admission/request.py    decode_review -> AdmissionRequest (bounds.py first)
    dispatch          here                            a kind's handler (seams.py), or the pod flow below
    gather facts      webhook/admission/gather.py     scope, intent, demand, tenant, policies, plan -> Facts
    render the patch  webhook/admission/mutate.py     /mutate: the JSON Patch, then the wings' after-hooks
    decide            webhook/admission/validate.py   /validate: policies, ownership, placement, the wings' gates
    respond           webhook/admission/response.py   Outcome -> AdmissionReview response

Only memory is read on the request path, except the calls SPEC names (SubjectAccessReview), which the
gates make within the request's deadline. Quotas hold no state here: the quota controller releases pods.
"""

from __future__ import annotations

from webhook.admission.mutate import Mutation
from webhook.admission.outcome import Outcome
from webhook.admission.ports import AdmissionPorts
from webhook.admission.request import AdmissionRequest
from webhook.admission.seams import AdmissionSeams, PendingVerdict
from webhook.admission.validate import Validation, fails_closed


class AdmissionService(Mutation, Validation):
    """Both flows over one set of ports (ports.py) and the seams the assembly filled (seams.py): a request of
    a kind some handler judges goes to it; a pod has the `before` hooks applied, then the pod flow."""

    def __init__(self, runtime: AdmissionPorts, seams: AdmissionSeams | None = None) -> None:
        super().__init__(runtime, seams)

    def mutate(self, request: AdmissionRequest, deadline: float | None = None) -> Outcome:
        handler = self.seams.handler_of(request)
        if handler is not None:
            return handler.mutate(request, deadline, self)
        return self.mutate_pod(self._before(request), deadline)

    def prepare_verdict(self, request: AdmissionRequest, deadline: float | None) -> Outcome | PendingVerdict:
        handler = self.seams.handler_of(request)
        if handler is not None:
            return handler.prepare_verdict(request, deadline, self)
        return self.prepare_pod_verdict(self._before(request), deadline)

    def fails_closed(self, request: AdmissionRequest) -> bool:
        """Whether `/validate` must refuse this request when it cannot decide (validate.py `fails_closed`)."""
        return fails_closed(request, self.seams.gates)

    def _before(self, request: AdmissionRequest) -> AdmissionRequest:
        for hook in self.seams.before:
            request = hook.before(request)
        return request
