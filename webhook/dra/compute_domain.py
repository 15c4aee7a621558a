"""A sized gang on a multi-node NVLink system, written for DRA: its ComputeDomain and the channel claim.

On DRA nodes, NVIDIA's driver reaches GPUs of other nodes in the same NVLink clique through IMEX, and
models that as a `ComputeDomain` (`resource.nvidia.com/v1beta1`). The driver's controller makes a
ResourceClaimTemplate for the domain's IMEX channel (named by `spec.channel.resourceClaimTemplate.name`,
in the domain's namespace); every pod of the workload names that template in `spec.resourceClaims`, and
each container that uses the GPUs lists the claim in `resources.claims`. Without it, the gang's pods get
GPUs but no NVLink between nodes.

What KGWE writes, for a pod of a sized gang (`kgwe.io/gang` + `kgwe.io/gang-size`) rendered for DRA when
every type the plan kept is in multi-node NVLink cliques:

- one ComputeDomain per namespace and gang, named by its content (`kgwe-cd-<hash>` of namespace, gang
  and spec): every member names the same one, so creating it is idempotent (409 AlreadyExists is the
  same domain), and a gang of another size gets another domain rather than a wrong one;
- `spec.numNodes`: the fewest nodes the gang fills, packed as tightly as the smallest node of the kept
  types allows: ceil(size / (GPUs per node // GPUs per pod)), at least 1. The driver waits for that many
  IMEX daemons before the domain is ready and treats the number as a minimum (more nodes may join,
  kubernetes-sigs/dra-driver-nvidia-gpu#368), so it must not be more than the gang can occupy and may
  be less than the nodes the scheduler spreads the pods over;
- the channel claim `kgwe-imex-channel` in the pod, on every container that got a GPU claim.

The ComputeDomain is created with the pod's ResourceClaimTemplates, by the same rules
(webhook/dra/templates.py): never on dry runs or in audit mode, and the mutation withdrawn when it
cannot be created. It is labelled `app.kubernetes.io/managed-by: kgwe` and `kgwe.io/gang`, and is not
deleted with a pod (the gang's other members name it): the leader removes it once no unfinished member
has named its channel template for a grace period (webhook/dra/garbage.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import orjson

from policies.vocabulary.objects import PodView, pod_view
from webhook.cluster.model import ClusterModel
from webhook.intent import A_GANG, A_GANG_SIZE, LABEL_GANG, parse_gang_size

API_VERSION = "resource.nvidia.com/v1beta1"
KIND = "ComputeDomain"
PLURAL = "computedomains"
CHANNEL_CLAIM = "kgwe-imex-channel"
NAME_PREFIX = "kgwe-cd-"
CHANNEL_SUFFIX = "-channel"


def gang_of(pod: PodView | Mapping[str, Any], plan_labels: dict[str, str]) -> tuple[str, int] | None:
    """(gang, size) of a sized gang member, or None. The gang is the one the plan labelled the pod with
    (already validated by the intent); the size is re-read through the same bounded parser."""
    gang = plan_labels.get(LABEL_GANG)
    view = pod_view(pod)
    if not gang or (view.annotation(A_GANG) or "").strip() != gang:
        return None
    raw = view.annotation(A_GANG_SIZE)
    if raw is None:
        return None
    size, _problem = parse_gang_size(raw)
    return (gang, size) if size is not None else None


def multi_node_nvlink(model: ClusterModel, types: list[str]) -> bool:
    """Every kept type is in multi-node NVLink cliques: only there do all members' nodes run the driver's
    IMEX daemons, so a channel claim cannot leave a member Pending on a node outside any clique."""
    return bool(types) and all(model.types[t].cliques for t in types)


def node_count(model: ClusterModel, types: list[str], size: int, gpus_per_pod: int) -> int:
    """The fewest nodes a gang of `size` pods with `gpus_per_pod` GPUs each fills (see the module docstring)."""
    per_node = min((model.types[t].max_gpus_per_node for t in types), default=0)
    pods_per_node = max(1, per_node // gpus_per_pod) if gpus_per_pod > 0 else size
    return max(1, -(-size // pods_per_node))


def compute_domain(namespace: str, gang: str, num_nodes: int) -> dict[str, Any]:
    """The ComputeDomain of one gang, named by its content; its channel template is `<name>-channel`."""
    digest_input = {"namespace": namespace, "gang": gang, "numNodes": num_nodes}
    digest = hashlib.sha256(orjson.dumps(digest_input, option=orjson.OPT_SORT_KEYS)).hexdigest()[:20]
    name = f"{NAME_PREFIX}{digest}"
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "kgwe", LABEL_GANG: gang},
        },
        "spec": {
            "numNodes": num_nodes,
            "channel": {"resourceClaimTemplate": {"name": f"{name}{CHANNEL_SUFFIX}"}},
        },
    }


def channel_template(domain: dict[str, Any]) -> str:
    return str(domain["spec"]["channel"]["resourceClaimTemplate"]["name"])
