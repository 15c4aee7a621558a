# GPU containers must not be privileged: a privileged container sees every GPU on the node, outside
# the device plugin's (or the DRA driver's) accounting. A GPU pod always lands on a GPU node, so the
# same holds for every other container of it, ephemeral ones included (`kubectl debug --profile=sysadmin`
# adds a privileged one to a running pod).
package kgwe.admission.privileged

import data.kgwe.lib.pod
import rego.v1

deny contains msg if {
	some c in pod.gpu_containers
	c.securityContext.privileged == true
	msg := sprintf("container %q uses GPUs and is privileged; privileged containers see every GPU on the node", [c.name])
}

deny contains msg if {
	pod.is_gpu_pod
	some c in pod.containers
	not pod.is_gpu_container(c)
	c.securityContext.privileged == true
	msg := sprintf("container %q is privileged in a pod that uses GPUs; privileged containers see every GPU on the node", [c.name])
}
