"""The `dra` section of KGWE's configuration (docs/dra.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Backend = Literal["device-plugin", "dra"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


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
