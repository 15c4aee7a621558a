"""Every label and annotation key KGWE reads or writes, and the values the annotations may take.

`kgwe.io/` keys are KGWE's own (SPEC section 2): the intent a pod creator writes, the output the
webhook writes back, the labels the agent publishes. The NVIDIA keys are GPU Feature Discovery's and
the device plugin's; the cloud keys are those GKE, Karpenter and every cloud put on GPU nodes. Modules
keep their own short aliases (`A_PROFILE`, `L_PRODUCT`) bound to these names.
"""

from __future__ import annotations

GROUP = "kgwe.io"
PREFIX = "kgwe.io/"
API_VERSION = "kgwe.io/v1alpha1"

# Intent: what a pod creator writes on a pod (or a pod template).
ACCELERATOR = "kgwe.io/accelerator"
PROFILE = "kgwe.io/profile"
GPU_MEMORY = "kgwe.io/gpu-memory"
SHARING = "kgwe.io/sharing"
GPU_FRACTION = "kgwe.io/gpu-fraction"
TOPOLOGY = "kgwe.io/topology"
GANG = "kgwe.io/gang"
GANG_SIZE = "kgwe.io/gang-size"
WORKLOAD = "kgwe.io/workload"  # `inference` lets built-in policies pick a MIG slice
RIGHTSIZING = "kgwe.io/rightsizing"  # `off` on a workload or pod: rightsizing.mode auto leaves it as asked

# Output: what the webhook writes on the pods it admits.
ACCELERATOR_TYPE = "kgwe.io/accelerator-type"
HOURLY_COST = "kgwe.io/hourly-cost"
TENANT = "kgwe.io/tenant"
DECISION = "kgwe.io/decision"
REQUESTED_BY = "kgwe.io/requested-by"  # who asked, signed (webhook/workloads/identity.py)
RIGHTSIZED_FROM = "kgwe.io/rightsized-from"  # the sizing intent asked before rightsizing.mode auto rewrote it

# Scheduling gates KGWE adds at CREATE and alone removes (the gang gate shares its name with the intent key).
QUOTA_GATE = "kgwe.io/quota"
# The pod condition a quota-gated pod carries while it waits.
QUOTA_CONDITION = "kgwe.io/QuotaAvailable"

# Node labels and annotations the agent publishes (docs/topology.md). The node annotation
# `kgwe.io/topology` shares its key with the pod's topology intent.
TOPOLOGY_DOCUMENT = TOPOLOGY
TOPOLOGY_HEARTBEAT = "kgwe.io/topology-heartbeat"
NVLINK_DOMAIN_SIZE = "kgwe.io/nvlink-domain-size"
NVLINK_CLIQUE = "kgwe.io/nvlink-clique"

# Values the intent annotations may take.
SHARING_MODES = ("exclusive", "mig", "mps", "time-slicing")
TOPOLOGIES = ("nvlink", "pcie", "none")

# GPU Feature Discovery and the NVIDIA device plugin.
NVIDIA_GPU_PRODUCT = "nvidia.com/gpu.product"
NVIDIA_GPU_MEMORY = "nvidia.com/gpu.memory"
NVIDIA_GPU_COUNT = "nvidia.com/gpu.count"
NVIDIA_GPU_REPLICAS = "nvidia.com/gpu.replicas"
NVIDIA_GPU_SHARING_STRATEGY = "nvidia.com/gpu.sharing-strategy"
NVIDIA_MIG_STRATEGY = "nvidia.com/mig.strategy"
NVIDIA_MIG_CONFIG_STATE = "nvidia.com/mig.config.state"
NVIDIA_GPU_CLIQUE = "nvidia.com/gpu.clique"
NVIDIA_GPU_PRESENT = "nvidia.com/gpu.present"
NVIDIA_GPU_FAMILY = "nvidia.com/gpu.family"

# AMD's node labeller (ROCm/k8s-device-plugin); older releases publish the same names under `beta.`.
AMD_GPU_PRODUCT_NAME = "amd.com/gpu.product-name"
AMD_GPU_VRAM = "amd.com/gpu.vram"
AMD_GPU_FAMILY = "amd.com/gpu.family"
AMD_GPU_DEVICE_ID = "amd.com/gpu.device-id"
AMD_BETA_PREFIX = "beta."

# Cloud providers and autoscalers.
GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"
GKE_ACCELERATOR_COUNT = "cloud.google.com/gke-accelerator-count"
GKE_GPU_PARTITION_SIZE = "cloud.google.com/gke-gpu-partition-size"
GKE_GPU_SHARING_STRATEGY = "cloud.google.com/gke-gpu-sharing-strategy"
GKE_MAX_SHARED_CLIENTS = "cloud.google.com/gke-max-shared-clients-per-gpu"
KARPENTER_GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
KARPENTER_GPU_MEMORY = "karpenter.k8s.aws/instance-gpu-memory"
KARPENTER_GPU_COUNT = "karpenter.k8s.aws/instance-gpu-count"
AKS_ACCELERATOR = "kubernetes.azure.com/accelerator"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
