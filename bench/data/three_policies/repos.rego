package admin.allowed_repos
import rego.v1
deny contains msg if {
	some c in input.request.object.spec.containers
	not startswith(c.image, "nvcr.io/")
	not startswith(c.image, "registry.example.com/")
	not startswith(c.image, "fluent/")
	msg := sprintf("container %s: image %s is not from an allowed registry", [c.name, c.image])
}
