# A container that asks for no GPU must not reach GPUs through NVIDIA_VISIBLE_DEVICES: the NVIDIA
# runtime would expose devices that the scheduler never gave it.
package kgwe.admission.visible_devices

import data.kgwe.lib.pod
import rego.v1

allowed_values := {"void", "none", ""}

# A container the scheduler gives at least one GPU or MIG slice. A GPU limit of 0 gives none, yet the
# NVIDIA runtime still honours the container's own NVIDIA_VISIBLE_DEVICES (`nvidia.com/gpu: 0` with
# `NVIDIA_VISIBLE_DEVICES=all` would see every GPU of the node).
receives_gpus(c) if {
	pod.is_gpu_container(c)
	some name, value in c.resources.limits
	gpu_resource(name)
	not value in {"0", 0, false}
}

gpu_resource(name) if name in {"nvidia.com/gpu", "amd.com/gpu"}

gpu_resource(name) if startswith(name, "nvidia.com/mig-")

deny contains msg if {
	some c in pod.containers
	not receives_gpus(c)
	some env in object.get(c, "env", [])
	env.name == "NVIDIA_VISIBLE_DEVICES"
	not object.get(env, "value", "") in allowed_values
	msg := sprintf("container %q sets NVIDIA_VISIBLE_DEVICES=%q without asking for a GPU", [c.name, object.get(env, "value", "")])
}

# A value read from a ConfigMap, a Secret or a field at run time may be `all`: never seen here, refused.
deny contains msg if {
	some c in pod.containers
	not receives_gpus(c)
	some env in object.get(c, "env", [])
	env.name == "NVIDIA_VISIBLE_DEVICES"
	object.get(env, "valueFrom", null) != null
	msg := sprintf("container %q takes NVIDIA_VISIBLE_DEVICES from valueFrom without asking for a GPU", [c.name])
}
