"""What the read side and the drivers ask of the wings: why a pod waits for its quota or its gang, which
pods a workload's templates make, the gang and Kueue documents of the reports.

Only the assembly imports a wing (docs/architecture.md). `kgwe explain`, `kgwe review`, the audit, the
inventory and the reports read a wing's state through these slots instead: each is a small Protocol that
one wing file fills (`webhook/quotas/reads.py`, `webhook/gangs/reads.py`, `webhook/workloads/reads.py`,
registered by webhook/assembly.py `register_read_wings`). Reading a slot before the assembly filled it
raises `SeamNotFilled` (webhook/ordered_seam.py). What the DRA wing tells the read side (claim charges and
payers) has its own slot, shared with the quota charges: webhook/cluster/claim_charging.py.
"""

from __future__ import annotations

from typing import Any, Protocol

from webhook.admission.seams import AdmissionSeams
from webhook.cluster.model import ClusterModel
from webhook.config import Config
from webhook.ordered_seam import SeamSlot
from webhook.wing_config import DraConfig, Gangs
from webhook.workload_kinds import KindSpec, KindTable, Template


class WingUnavailable(RuntimeError):
    """A wing could not read what a command asked of it (the gang records in time)."""


class QuotaReads(Protocol):
    """The quota wing's waiting pods, as the quota controller would plan them from a snapshot."""

    def why_waiting(self, model: ClusterModel, config: Config, pod_key: str) -> str | None:
        """Why this gated pod (namespace/name) waits for quota now; None if it would be released."""
        ...

    def waiting_rows(self, model: ClusterModel, config: Config) -> dict[str, dict[str, Any]]:
        """Per tenant: the pods that wait for quota (the tenants view's `waiting`)."""
        ...

    def queue_answer(self, model: ClusterModel, config: Config, pod: dict[str, Any]) -> str | None:
        """What `kgwe review` says of a pod `/mutate` gated for quota; None for a pod the gate does not hold."""
        ...


class GangReads(Protocol):
    """The gang wing's rooms and records, for `kgwe explain` and `kgwe gangs`."""

    def why_gang_waits(self, model: ClusterModel, settings: Gangs, pod: dict[str, Any]) -> str | None:
        """Why the gang of this gated member waits now; None for a pod of no sized gang."""
        ...

    def gangs_document(self, model: ClusterModel, settings: Gangs, api_client: Any | None) -> dict[str, Any]:
        """The gangs view: the leader's records read from the API (`api_client`), or, with none (a directory
        keeps no records), planned from the pods as the controller would. Raises WingUnavailable when the
        records cannot be read in time."""
        ...


    def native_gangs(self, model: ClusterModel, settings: Gangs) -> bool:
        """Whether new gang members join a PodGroup (the controllers then need the Workload API's verbs)."""
        ...


class WorkloadReads(Protocol):
    """The workloads wing's kind table and pod counts, for `kgwe review`, `kgwe explain` and the audit."""

    def kind_table(self, seams: AdmissionSeams) -> KindTable:
        """The kinds the workload handler registered in `seams` admits (built-ins and the configuration's)."""
        ...

    def pods_per_template(
        self, workload: dict[str, Any], spec: KindSpec, templates: list[Template]
    ) -> list[int | None]:
        """Pods each template makes at once (None: unknown); WorkloadShapeError for a count out of range."""
        ...

    def kueue_manifests(
        self, model: ClusterModel, *, cohort: str | None = None, dra: DraConfig | None = None
    ) -> list[dict[str, Any]]:
        """Kueue ResourceFlavors and a ClusterQueue for this cluster's GPUs (`kgwe profiles --kueue -o json`)."""
        ...

    def render_kueue(self, model: ClusterModel, *, cohort: str | None = None, dra: DraConfig | None = None) -> str:
        """The same manifests as commented YAML."""
        ...


QUOTA_READS: SeamSlot[QuotaReads] = SeamSlot("the quota wing's reads")
GANG_READS: SeamSlot[GangReads] = SeamSlot("the gang wing's reads")
WORKLOAD_READS: SeamSlot[WorkloadReads] = SeamSlot("the workloads wing's reads")
