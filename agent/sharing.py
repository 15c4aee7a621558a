"""The node's GPU sharing state from what NVML shows and what the device plugin's labels say.

Time-slicing is invisible to NVML: only the device plugin's configuration (through GFD's labels) knows it.
MPS leaves a trace in NVML: the MPS control daemon puts the GPUs it serves into EXCLUSIVE_PROCESS compute
mode. The labels say how many replicas the device plugin advertises, so they win where present; NVML
alone can reveal MPS but not its replica count. Running MPS clients are deliberately not counted: they
come and go with workloads and would make the published document change with every job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policies.vocabulary import keys
from policies.vocabulary.topology_schema import Sharing

LABEL_SHARING_STRATEGY = keys.NVIDIA_GPU_SHARING_STRATEGY
LABEL_REPLICAS = keys.NVIDIA_GPU_REPLICAS
COMPUTE_MODE_EXCLUSIVE_PROCESS = "exclusive-process"
_STRATEGIES = ("mps", "time-slicing")


def _replicas(labels: Mapping[str, str]) -> int:
    try:
        return max(1, int(labels.get(LABEL_REPLICAS, "1")))
    except ValueError:
        return 1


def sharing_state(compute_modes: Sequence[str | None], labels: Mapping[str, str]) -> Sharing:
    """`compute_modes`: NVML compute mode of each healthy full (non-MIG) GPU."""
    strategy = labels.get(LABEL_SHARING_STRATEGY, "")
    replicas = _replicas(labels)
    nvml_mps = bool(compute_modes) and all(mode == COMPUTE_MODE_EXCLUSIVE_PROCESS for mode in compute_modes)
    if strategy in _STRATEGIES and replicas > 1:
        source = "labels+nvml" if strategy == "mps" and nvml_mps else "labels"
        return Sharing(strategy=strategy, replicas=replicas, source=source)
    if nvml_mps:
        return Sharing(strategy="mps", replicas=1, source="nvml")
    return Sharing(strategy="none", replicas=1, source="labels" if strategy else None)
