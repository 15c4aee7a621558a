# Namespaces labelled `kgwe.io/default-sharing: mig` get a MIG slice by default: the smallest profile
# that holds the pod's `kgwe.io/gpu-memory` (the smallest offered when it names none), on the types
# the user allowed. Applies to pods asking for at most one GPU that chose no sharing and no profile.
package kgwe.placement.namespace_mig

import data.kgwe.lib.pod
import rego.v1

decision := {"acceleratorTypes": types, "sharing": {"mode": "mig", "migProfile": profile}} if {
	pod.namespace_labels["kgwe.io/default-sharing"] == "mig"
	pod.intent_absent("sharing")
	pod.intent_absent("profile")
	pod.requested_gpus <= 1
	need := object.get(input.intent, "gpuMemory", 0)
	[profile, types] := pod.smallest_mig(need_or_zero(need), pod.intent_types)
}

need_or_zero(n) := n if is_number(n)

need_or_zero(n) := 0 if not is_number(n)
