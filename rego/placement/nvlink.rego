# A pod asking for more than one GPU, where every type it may run on has NVSwitch, needs all its GPUs
# on one NVLink domain: topology `nvlink`, unless the user chose a topology.
package kgwe.placement.nvlink

import data.kgwe.lib.pod
import rego.v1

decision := {"topology": "nvlink"} if {
	pod.intent_absent("topology")
	pod.requested_gpus > 1
	types := candidate_types
	count(types) > 0
	not without_nvswitch(types)
}

# Some candidate type lacks NVSwitch (or the cluster does not list it). Written without `every`, which
# regorus' compiled VM evaluates wrongly when the body indexes by the loop variable.
without_nvswitch(types) if {
	some type_id in types
	not pod.cluster_types[type_id].nvswitch == true
}

candidate_types := pod.intent_types if count(pod.intent_types) > 0

# No type asked: every type with a node large enough for the pod.
candidate_types := [type_id |
	some type_id, t in pod.cluster_types
	type_id != "unknown"
	t.maxGpusPerNode >= pod.requested_gpus
] if {
	count(pod.intent_types) == 0
}
