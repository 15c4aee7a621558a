"""The configuration sections of the wings (SPEC section 6): `dra`, `workloads`, `gangs` and `quotas`. They
sit below the configuration (webhook/config.py `Config`) and the wings both, so that the configuration is
read and checked in one place without importing a wing, and each wing reads its own section from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from webhook.template_path import TemplatePath


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# -- dra (docs/dra.md) ------------------------------------------------------------------------------
Backend = Literal["device-plugin", "dra"]


class NodePoolBackend(_Section):
    """Nodes whose labels include all of `nodeSelector` are rendered with `backend`."""

    node_selector: dict[str, str] = Field(alias="nodeSelector", min_length=1)
    backend: Backend


class DraConfig(_Section):
    # auto: a node is rendered with DRA when its GPUs are published in ResourceSlices and it has no
    # NVIDIA extended resources; device-plugin / dra force one backend for every node.
    backend: Literal["auto", "device-plugin", "dra"] = "auto"
    # Per node pool overrides, first match wins (before `backend`).
    node_pools: list[NodePoolBackend] = Field(default_factory=list, alias="nodePools")
    # The mutating webhook creates the ResourceClaimTemplates it names (never on dry runs). Off: an
    # operator or controller must create them (`kgwe review` prints them).
    create_templates: bool = Field(default=True, alias="createTemplates")
    # DeviceClasses of NVIDIA's GPU DRA driver that the templates name.
    gpu_device_class: str = Field(default="gpu.nvidia.com", alias="gpuDeviceClass")
    mig_device_class: str = Field(default="mig.nvidia.com", alias="migDeviceClass")
    # The DeviceClass of the NICs `kgwe.io/topology: pcie` puts beside each GPU under one PCIe root
    # (`matchAttribute: resource.kubernetes.io/pcieRoot`); DRANET (driver `dra.net`) installs `dranet`.
    nic_device_class: str = Field(default="dranet", alias="nicDeviceClass")
    # The leader deletes the templates and ComputeDomains KGWE created once no unfinished pod has named
    # them for unusedGraceSeconds (webhook/dra/garbage.py). The floor is what keeps a replica from
    # skipping the create of a template it remembers making (templates.REMEMBER_SECONDS, 300) after the
    # leader deleted it, plus a minute for the pod's creation and the watch to reach the model.
    remove_unused: bool = Field(default=True, alias="removeUnused")
    unused_grace_seconds: float = Field(default=600.0, ge=360.0, alias="unusedGraceSeconds")


class Quotas(_Section):
    """How KGWE's quota controller releases gated pods (SPEC section 10, docs/quotas.md)."""

    # Release order per tenant: creation order. BestEffortFIFO lets a pod that fits pass one that does not;
    # StrictFIFO keeps every later pod waiting behind the first that does not fit.
    order: Literal["BestEffortFIFO", "StrictFIFO"] = "BestEffortFIFO"
    # queue: a pod over its tenant's quota is admitted gated and waits; refuse: it is refused at admission
    # when it does not fit the usage the controller last counted (an early answer; the gate still decides).
    over_quota: Literal["queue", "refuse"] = Field(default="queue", alias="overQuota")
    # kueue: namespaces picked by `deferNamespaceSelector` (every namespace when it is unset) get no quota gate;
    # Kueue admits their workloads against its own ClusterQueues.
    defer_to: Literal["none", "kueue"] = Field(default="none", alias="deferTo")
    # A label selector of the namespaces `deferTo: kueue` covers (Kubernetes' matchLabels/matchExpressions).
    defer_namespace_selector: dict[str, Any] | None = Field(default=None, alias="deferNamespaceSelector")
    # Accepted and ignored: v1.1's reservations are gone (a configuration written for v1.1 still loads).
    reservation_grace_seconds: float | None = Field(default=None, alias="reservationGraceSeconds")


class Gangs(_Section):
    # A gang waiting gated this long gets an Event on its members, a reason in `kgwe gangs`, and a metric.
    wait_warning_seconds: float = Field(default=300.0, gt=0, alias="waitWarningSeconds")
    # An incomplete gang (fewer members than kgwe.io/gang-size) keeps its room promise this long; a gang
    # released to the scheduler that never binds fully drops its record after this long too.
    timeout_seconds: float = Field(default=900.0, gt=0, alias="timeoutSeconds")
    # auto: where API discovery finds the Workload API (scheduling.k8s.io/v1alpha2 workloads and podgroups), members
    # join a PodGroup KGWE creates at release and kube-scheduler binds the gang all or nothing; off: never.
    workload_api: Literal["auto", "off"] = Field(default="auto", alias="workloadAPI")


class WorkloadKind(_Section):
    """A workload kind an admin adds (or redefines): where its pod templates are (see docs/workloads.md)."""

    group: str = ""
    kind: str
    resource: str  # the plural, as in the webhook configuration's rules
    version: str = "v1"
    templates: list[str] = Field(min_length=1, max_length=16)

    @field_validator("templates")
    @classmethod
    def _paths(cls, value: list[str]) -> list[str]:
        for path in value:
            TemplatePath.parse(path)  # ValueError names the bad segment
        return value


# kube-controller-manager's controllers (per-controller credentials, the default since 1.x, and the
# shared identity when --use-service-account-credentials=false) and the operators' service accounts
# in the namespaces their standard installs use. Admins change the list in `workloads.controllerIdentities`.
DEFAULT_CONTROLLER_IDENTITIES = (
    "system:kube-controller-manager",
    "system:serviceaccount:kube-system:replicaset-controller",
    "system:serviceaccount:kube-system:deployment-controller",
    "system:serviceaccount:kube-system:job-controller",
    "system:serviceaccount:kube-system:statefulset-controller",
    "system:serviceaccount:kube-system:daemon-set-controller",
    "system:serviceaccount:kube-system:cronjob-controller",
    "system:serviceaccount:jobset-system:jobset-controller-manager",
    "system:serviceaccount:lws-system:lws-controller-manager",
    "system:serviceaccount:kubeflow:training-operator",
    "system:serviceaccount:ray-system:kuberay-operator",
    "system:serviceaccount:kueue-system:kueue-controller-manager",
)


class Workloads(_Section):
    # Admit the pod templates of workloads (SPEC section 7).
    enabled: bool = True
    kinds: list[WorkloadKind] = Field(default_factory=list)
    max_templates: int = Field(default=64, ge=1, le=1024, alias="maxTemplates")
    # Requesters whose pods are judged as the user who wrote the template (a verified kgwe.io/requested-by).
    controller_identities: list[str] = Field(
        default_factory=lambda: list(DEFAULT_CONTROLLER_IDENTITIES), alias="controllerIdentities"
    )
    # The requested-by signing key (the chart's Secret, mounted); unset: made once under the state directory.
    identity_key_file: Path | None = Field(default=None, alias="identityKeyFile")
