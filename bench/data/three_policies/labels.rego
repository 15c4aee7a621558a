package admin.required_labels
import rego.v1
deny contains msg if {
	not input.request.object.metadata.labels.owner
	msg := "every pod needs an owner label"
}
