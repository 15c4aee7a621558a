# Helpers shared by the built-in policies: which containers use GPUs, the user's intent, MIG offers.
package kgwe.lib.pod

import rego.v1

pod := input.request.object

# Every container of the pod, init and ephemeral ones included. An array, not a set: sets of whole
# container objects cost a hash of each object per query.
containers := array.concat(
	array.concat(object.get(pod.spec, "containers", []), object.get(pod.spec, "initContainers", [])),
	object.get(pod.spec, "ephemeralContainers", []),
)

# Extended resources must appear in limits (requests may only repeat them), so limits decide.
is_gpu_container(c) if c.resources.limits["nvidia.com/gpu"]

is_gpu_container(c) if c.resources.limits["amd.com/gpu"]

is_gpu_container(c) if {
	some name, _ in c.resources.limits
	startswith(name, "nvidia.com/mig-")
}

gpu_containers := [c | some c in containers; is_gpu_container(c)]

is_gpu_pod if count(gpu_containers) > 0

# An intent field the user did not set (absent or null).
intent_absent(key) if object.get(object.get(input, "intent", {}), key, null) == null

intent_set(key) if not intent_absent(key)

requested_gpus := object.get(object.get(input, "intent", {}), "gpus", 0)

labels := pod.metadata.labels if is_object(pod.metadata.labels) else := {}

annotations := pod.metadata.annotations if is_object(pod.metadata.annotations) else := {}

# Inference pods: intent flag from the webhook, or `kgwe.io/workload: inference` as label or annotation.
is_inference if input.intent.inference == true

is_inference if labels["kgwe.io/workload"] == "inference"

is_inference if annotations["kgwe.io/workload"] == "inference"

# The namespace object may be missing (null): regorus, unlike OPA, errors on object.get(null, ...).
namespace_labels := input.namespaceObject.metadata.labels if {
	is_object(input.namespaceObject.metadata.labels)
} else := {}

cluster_types := object.get(data.kgwe.cluster, "types", {})

# MIG profile name "3g.40gb" -> compute slices 3.
compute_slices(profile) := to_number(split(profile, "g.")[0])

# Every MIG offer in the cluster: [memory GB, compute slices, profile, type id].
mig_offers contains [info.memoryGB, compute_slices(profile), profile, type_id] if {
	some type_id, t in cluster_types
	some profile, info in object.get(t, "mig", {})
	info.devices > 0
	is_number(info.memoryGB)
}

# The smallest MIG profile with at least `need_bytes` of memory on one of `types` (any type when empty):
# [profile, [type ids offering it]]. A profile's "<N>gb" is read as GiB, as the webhook reads it and
# as users write memory (10Gi fits 1g.10gb).
smallest_mig(need_bytes, types) := [profile, offering] if {
	fitting := {[mem, slices, profile] |
		some [mem, slices, profile, type_id] in mig_offers
		allowed_type(type_id, types)
		mem * 1073741824 >= need_bytes
	}
	count(fitting) > 0
	best := min(fitting)
	profile := best[2]
	offering := sort([type_id |
		some [_, _, p, type_id] in mig_offers
		p == profile
		allowed_type(type_id, types)
	])
}

allowed_type(_, types) if count(types) == 0

allowed_type(type_id, types) if type_id in types

intent_types := object.get(object.get(input, "intent", {}), "acceleratorTypes", []) if {
	intent_set("acceleratorTypes")
} else := []

# GPUs through Dynamic Resource Allocation: a DeviceClass asked as an extended resource (KEP-5004), or a
# claim of the pod's given to the container. What a claim holds is known only once the API server is
# asked (or after allocation), so every such device counts as a GPU here: a rule must never be weaker
# for a pod because it asked its GPUs through DRA. (At the end of the module on purpose: with these rules
# above `intent_set`, the embedded regorus failed every query with "binding plan not found for parameter".)
is_gpu_container(c) if {
	some name, _ in c.resources.limits
	startswith(name, "deviceclass.resource.kubernetes.io/")
}

is_gpu_container(c) if count(c.resources.claims) > 0

# Claims the pod names may give devices to containers that name none of them in limits.
is_gpu_pod if count(object.get(pod.spec, "resourceClaims", [])) > 0
