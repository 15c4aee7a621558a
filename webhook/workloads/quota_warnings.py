"""A workload's replicas against its tenant's quota, told at the workload's admission: replicas x GPUs a pod beyond
a limit per type is a warning (the pods' own quota check decides when they are made)."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from policies.gpu_demand import pod_gpu_demand
from webhook.admission.request import AdmissionRequest
from webhook.admission.tenancy import tenant_and_quotas
from webhook.cluster.model import ClusterModel
from webhook.costs import pod_gpu_equivalents
from webhook.intent import OUT_ACCELERATOR_TYPE, annotations_of
from webhook.workloads.template_pods import num


def replicas_over_quota(templates: Sequence[tuple[int | None, AdmissionRequest]], pods: list[dict[str, Any]],
                        model: ClusterModel) -> list[str]:
    """For each template (pods made from it at once, its pod request) and its mutated pod: the warnings of types
    whose limit the workload's replicas together pass."""
    totals: dict[str, tuple[Decimal, list[str]]] = {}
    tenant = ""
    quotas: list[dict[str, Any]] = []
    for (count, request), pod in zip(templates, pods, strict=True):
        if not count:
            continue
        types = [t for t in annotations_of(pod).get(OUT_ACCELERATOR_TYPE, "").split(",") if t]
        if len(types) != 1 or not pod_gpu_demand(pod).asks_gpu:
            continue
        if not quotas:
            tenant, quotas = tenant_and_quotas(request, model)
        per_pod = pod_gpu_equivalents(pod, None, types[0], model)
        total, parts = totals.get(types[0], (Decimal(0), []))
        totals[types[0]] = (total + per_pod * count, [*parts, f"{count} pods x {num(per_pod)}"])
    warnings = []
    for quota in quotas:
        for limit in (quota.get("spec") or {}).get("limits") or []:
            type_id = limit.get("acceleratorType") if isinstance(limit, dict) else None
            gpus = limit.get("gpus") if isinstance(limit, dict) else None
            if type_id in totals and isinstance(gpus, (int, float)) and totals[type_id][0] > Decimal(str(gpus)):
                total, parts = totals[type_id]
                warnings.append(
                    f"{num(total)} {type_id} GPUs asked ({' + '.join(parts)}) > tenant {tenant}'s limit {gpus}; "
                    "excess pods will be refused"
                )
    return warnings
