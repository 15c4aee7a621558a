"""The versioned `kgwe.io/topology` node annotation: the one thing the agent and the webhook share.

The agent writes it (see docs/topology.md); the webhook's cluster model reads it. Unknown fields are
kept so that an older webhook can read a newer agent's document.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field

from policies.vocabulary import keys

SCHEMA_VERSION = 1
ANNOTATION = keys.TOPOLOGY
HEARTBEAT_ANNOTATION = keys.TOPOLOGY_HEARTBEAT
LABEL_ACCELERATOR_TYPE = keys.ACCELERATOR_TYPE
LABEL_NVLINK_DOMAIN_SIZE = keys.NVLINK_DOMAIN_SIZE
LABEL_NVLINK_CLIQUE = keys.NVLINK_CLIQUE


class _Doc(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class MigInstance(_Doc):
    profile: str
    uuid: str | None = None
    gpu_instance_id: int | None = Field(default=None, alias="gpuInstanceId")
    compute_instance_id: int | None = Field(default=None, alias="computeInstanceId")
    memory_mib: int | None = Field(default=None, alias="memoryMiB")


class Gpu(_Doc):
    index: int
    uuid: str
    product: str
    # The device name exactly as NVML reports it; `product` is its GFD-style sanitised form.
    name: str | None = None
    accelerator_type: str = Field(alias="acceleratorType")
    memory_mib: int = Field(alias="memoryMiB")
    pci_bus_id: str | None = Field(default=None, alias="pciBusId")
    numa_node: int | None = Field(default=None, alias="numaNode")
    compute_capability: str | None = Field(default=None, alias="computeCapability")
    healthy: bool = True
    error: str | None = None
    mig_enabled: bool = Field(default=False, alias="migEnabled")
    mig_instances: list[MigInstance] = Field(default_factory=list, alias="migInstances")
    compute_mode: str | None = Field(default=None, alias="computeMode")


class NvLink(_Doc):
    # matrix[i][j]: number of NVLink links between GPU i and GPU j (direct or through NVSwitch).
    matrix: list[list[int]] = Field(default_factory=list)
    domain_size: int = Field(default=0, alias="domainSize")
    switched: bool = False
    # Indices of the GPUs that form the largest all-to-all set (its size is domain_size).
    domain: list[int] = Field(default_factory=list)


class Fabric(_Doc):
    cluster_uuid: str = Field(alias="clusterUuid")
    clique_id: int = Field(alias="cliqueId")

    @property
    def clique(self) -> str:
        return f"{self.cluster_uuid}.{self.clique_id}"


class Sharing(_Doc):
    strategy: str = "none"  # none | mps | time-slicing
    replicas: int = 1
    source: str | None = None  # labels | nvml | labels+nvml


class TopologyDocument(_Doc):
    version: int = SCHEMA_VERSION
    agent_version: str = Field(default="", alias="agentVersion")
    timestamp: datetime
    node: str = ""
    accelerator_type: str = Field(default="unknown", alias="acceleratorType")
    driver_version: str | None = Field(default=None, alias="driverVersion")
    cuda_driver_version: str | None = Field(default=None, alias="cudaDriverVersion")
    gpus: list[Gpu] = Field(default_factory=list)
    nvlink: NvLink = Field(default_factory=NvLink)
    fabric: Fabric | None = None
    sharing: Sharing = Field(default_factory=Sharing)

    def age_seconds(self, now: datetime | None = None) -> float:
        current = now or datetime.now(UTC)
        stamp = self.timestamp if self.timestamp.tzinfo else self.timestamp.replace(tzinfo=UTC)
        return max(0.0, (current - stamp).total_seconds())

    def to_annotation(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True)
