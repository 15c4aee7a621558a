"""From a scan (plain NVML data) and the node's labels to the `kgwe.io/topology` document."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from importlib import metadata

from agent.fabric import node_clique
from agent.nvlink import largest_all_to_all, peer_matrix
from agent.nvml_discovery import GpuInfo, NodeScan
from agent.sharing import sharing_state
from policies.vocabulary.accelerator_types import MIXED, UNKNOWN, AcceleratorTable, default_table
from policies.vocabulary.product_names import sanitise_product
from policies.vocabulary.topology_schema import Gpu, MigInstance, NvLink, TopologyDocument


def agent_version() -> str:
    try:
        return metadata.version("kgwe")
    except metadata.PackageNotFoundError:
        return "0.0.0+unknown"


def _gpu(info: GpuInfo, table: AcceleratorTable) -> Gpu:
    known = bool(info.name) and info.memory_mib > 0
    return Gpu(
        index=info.index,
        uuid=info.uuid,
        product=sanitise_product(info.name) if info.name else UNKNOWN,
        name=info.name or None,
        acceleratorType=table.from_product(info.name, info.memory_mib) if known else UNKNOWN,
        memoryMiB=info.memory_mib,
        pciBusId=info.pci_bus_id,
        numaNode=info.numa_node,
        computeCapability=info.compute_capability,
        healthy=info.healthy,
        error=info.error,
        migEnabled=info.mig_enabled,
        migInstances=[
            MigInstance(
                profile=mig.profile,
                uuid=mig.uuid,
                gpuInstanceId=mig.gpu_instance_id,
                computeInstanceId=mig.compute_instance_id,
                memoryMiB=mig.memory_mib,
            )
            for mig in info.mig_devices
        ],
        computeMode=info.compute_mode,
    )


def node_accelerator_type(gpus: list[Gpu]) -> str:
    """The node's type id: GPUs whose type could not be read (a lost GPU) do not make the node `mixed`."""
    types = {gpu.accelerator_type for gpu in gpus if gpu.accelerator_type != UNKNOWN}
    if not types:
        return UNKNOWN
    return types.pop() if len(types) == 1 else MIXED


def build_document(
    scan: NodeScan,
    *,
    node_name: str,
    now: datetime,
    node_labels: Mapping[str, str] | None = None,
    table: AcceleratorTable | None = None,
) -> TopologyDocument:
    """The topology document for one scan.

    The NVLink domain counts only GPUs a pod can be given whole: healthy and not MIG-enabled (MIG
    instances cannot use NVLink). The clique is asked of the healthy GPUs; a lost GPU does not take the
    node out of its clique, a healthy GPU outside it does.
    """
    types = table or default_table()
    gpus = [_gpu(info, types) for info in scan.gpus]
    matrix, switched = peer_matrix([g.pci_bus_id for g in scan.gpus], [g.nvlinks for g in scan.gpus])
    whole = [g.healthy and not g.mig_enabled for g in scan.gpus]
    domain = largest_all_to_all(matrix, whole)
    healthy = [g for g in scan.gpus if g.healthy]
    compute_modes = [g.compute_mode for g in healthy if not g.mig_enabled]
    return TopologyDocument(
        agentVersion=agent_version(),
        timestamp=now,
        node=node_name,
        acceleratorType=node_accelerator_type(gpus),
        driverVersion=scan.driver_version,
        cudaDriverVersion=scan.cuda_driver_version,
        gpus=gpus,
        nvlink=NvLink(matrix=matrix, domainSize=len(domain), switched=switched, domain=domain),
        fabric=node_clique([g.fabric for g in healthy]),
        sharing=sharing_state(compute_modes, node_labels or {}),
    )
