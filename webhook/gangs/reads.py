"""The gang wing's part of the read side's seam (webhook/read_seams.py `GangReads`): why a member waits,
the gangs view of `kgwe gangs`. Registered by webhook/assembly.py."""

from __future__ import annotations

import time
from typing import Any

from webhook.cluster.model import ClusterModel
from webhook.gangs.ledger import GangStoreUnavailable, KubeGangStore
from webhook.gangs.native import native_gangs as native_gangs
from webhook.gangs.planning import planned_records
from webhook.gangs.view import gangs_view
from webhook.gangs.view import why_gang_waits as view_why_gang_waits
from webhook.read_seams import WingUnavailable
from webhook.wing_config import Gangs

# How long `kgwe gangs` waits for the GangLedger.
RECORDS_TIMEOUT_SECONDS = 30


def why_gang_waits(model: ClusterModel, settings: Gangs, pod: dict[str, Any]) -> str | None:
    return view_why_gang_waits(model, settings, pod)


def gangs_document(model: ClusterModel, settings: Gangs, api_client: Any | None) -> dict[str, Any]:
    if api_client is None:  # a directory keeps no records: planned from its pods, as the controller would
        return gangs_view(model, planned_records(model, settings, time.time()), recorded=False)
    from webhook.cluster.kube_json import KubeJson

    try:
        records = KubeGangStore(KubeJson(api_client)).read(timeout=RECORDS_TIMEOUT_SECONDS).records
    except GangStoreUnavailable as exc:
        raise WingUnavailable(str(exc)) from exc
    return gangs_view(model, records)
