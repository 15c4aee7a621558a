# GPU containers should set a memory limit: GPU jobs pin host memory and an unlimited one can take
# the node down with it.
package kgwe.admission.memory_limit

import data.kgwe.lib.pod
import rego.v1

warn contains msg if {
	some c in pod.gpu_containers
	not c.resources.limits.memory
	msg := sprintf("container %q uses GPUs but sets no memory limit", [c.name])
}
