# GPU containers must not be privileged: a privileged container sees every GPU on the node, outside
# the device plugin's accounting.
package kgwe.admission.privileged

import data.kgwe.lib.pod
import rego.v1

deny contains msg if {
	some c in pod.gpu_containers
	c.securityContext.privileged == true
	msg := sprintf("container %q uses GPUs and is privileged; privileged containers see every GPU on the node", [c.name])
}
