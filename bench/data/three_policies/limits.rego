package admin.gpu_limits
import rego.v1
deny contains msg if {
	some c in input.request.object.spec.containers
	c.resources.requests["nvidia.com/gpu"]
	not c.resources.limits["nvidia.com/gpu"]
	msg := sprintf("container %s: GPU requests need limits", [c.name])
}
