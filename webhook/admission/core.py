"""The admission core: review in, outcome out. No HTTP here; the server and `kgwe review` both call it.

Data flows one way, one module per stage:

    decode            webhook/admission/request.py    decode_review -> AdmissionRequest (bounds.py first)
    gather facts      webhook/admission/gather.py     scope, intent, demand, tenant, policies, plan -> Facts
    render the patch  webhook/admission/mutate.py     /mutate: the JSON Patch, gang record, DRA templates
    decide            webhook/admission/validate.py   /validate: policies, ownership, placement, RBAC, quota
    respond           webhook/admission/response.py   Outcome -> AdmissionReview response

Only memory is read on the request path, except the calls SPEC names (SubjectAccessReview), which the
gates make within the request's deadline. Quotas hold no state here: the quota controller releases pods.
"""

from __future__ import annotations

from webhook.admission.mutate import Mutation
from webhook.admission.ports import AdmissionPorts
from webhook.admission.validate import Validation


class AdmissionService(Mutation, Validation):
    """Both flows over one set of ports (webhook/admission/ports.py); webhook/workloads extends it."""

    def __init__(self, runtime: AdmissionPorts) -> None:
        super().__init__(runtime)
