# An inference pod (`kgwe.io/workload: inference`) asking for at most 20Gi of GPU memory and no
# accelerator type, profile or sharing mode gets the smallest MIG slice that fits, where the cluster
# offers MIG at all.
package kgwe.placement.inference_mig

import data.kgwe.lib.pod
import rego.v1

max_memory_bytes := 21474836480 # 20Gi

decision := {"acceleratorTypes": types, "sharing": {"mode": "mig", "migProfile": profile}} if {
	pod.is_inference
	pod.intent_absent("acceleratorTypes")
	pod.intent_absent("profile")
	pod.intent_absent("sharing")
	pod.requested_gpus <= 1
	need := input.intent.gpuMemory
	is_number(need)
	need <= max_memory_bytes
	[profile, types] := pod.smallest_mig(need, [])
}
