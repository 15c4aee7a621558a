"""Extended resource names of GPUs as device plugins advertise them and pods request them.

One place for the strings `nvidia.com/gpu`, `nvidia.com/mig-<profile>` and `amd.com/gpu`: the policy
layer counts a pod's demand with them, the webhook reads node capacity and writes placement with them.
"""

from __future__ import annotations

NVIDIA_GPU = "nvidia.com/gpu"
AMD_GPU = "amd.com/gpu"
# MIG slices under the device plugin's `mixed` strategy: `nvidia.com/mig-1g.10gb`.
NVIDIA_MIG_PREFIX = "nvidia.com/mig-"
# Resources that are GPUs: every `nvidia.com/` name (whole GPUs, MIG slices, shared replicas) and AMD's.
GPU_RESOURCE_PREFIXES = ("nvidia.com/", AMD_GPU)
# Resources whose count is a number of devices (a whole GPU or one MIG slice each).
WHOLE_DEVICE_RESOURCES = (NVIDIA_GPU, AMD_GPU)
# HAMi's memory and core shares of one GPU: a pod asking for them is shared by HAMi, not by KGWE.
HAMI_RESOURCES = ("nvidia.com/gpumem", "nvidia.com/gpucores", "nvidia.com/gpumem-percentage")
# The taint keys that mark GPU nodes by default (`gpuTaintKeys` in the configuration).
DEFAULT_GPU_TAINT_KEYS = (NVIDIA_GPU, AMD_GPU, "kgwe.io/gpu")
