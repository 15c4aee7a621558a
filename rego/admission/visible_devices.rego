# A container that asks for no GPU must not reach GPUs through NVIDIA_VISIBLE_DEVICES: the NVIDIA
# runtime would expose devices that the scheduler never gave it.
package kgwe.admission.visible_devices

import data.kgwe.lib.pod
import rego.v1

allowed_values := {"void", "none", ""}

deny contains msg if {
	some c in pod.containers
	not pod.is_gpu_container(c)
	some env in object.get(c, "env", [])
	env.name == "NVIDIA_VISIBLE_DEVICES"
	not object.get(env, "value", "") in allowed_values
	msg := sprintf("container %q sets NVIDIA_VISIBLE_DEVICES=%q without asking for a GPU", [c.name, object.get(env, "value", "")])
}
