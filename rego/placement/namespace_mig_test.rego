package kgwe.placement.namespace_mig_test

import data.kgwe.lib.testdata
import data.kgwe.placement.namespace_mig
import rego.v1

mig_namespace := testdata.namespace({"kgwe.io/default-sharing": "mig"})

test_mig_namespace_gets_smallest_fitting_slice if {
	inp := {"request": testdata.request([testdata.gpu_container]), "namespaceObject": mig_namespace,
		"intent": {"gpus": 1, "gpuMemory": 15000000000}}
	d := namespace_mig.decision with input as inp with data.kgwe.cluster as testdata.cluster
	d == {"acceleratorTypes": ["nvidia-a100-80gb"], "sharing": {"mode": "mig", "migProfile": "2g.20gb"}}
}

test_mig_namespace_without_memory_gets_smallest_slice if {
	inp := {"request": testdata.request([testdata.gpu_container]), "namespaceObject": mig_namespace, "intent": {"gpus": 1}}
	d := namespace_mig.decision with input as inp with data.kgwe.cluster as testdata.cluster
	d.sharing.migProfile == "1g.5gb"
}

test_user_sharing_wins if {
	inp := {"request": testdata.request([testdata.gpu_container]), "namespaceObject": mig_namespace,
		"intent": {"gpus": 1, "sharing": "exclusive"}}
	not namespace_mig.decision with input as inp with data.kgwe.cluster as testdata.cluster
}

test_other_namespaces_untouched if {
	inp := {"request": testdata.request([testdata.gpu_container]), "namespaceObject": testdata.namespace({}), "intent": {"gpus": 1}}
	not namespace_mig.decision with input as inp with data.kgwe.cluster as testdata.cluster
}

test_missing_namespace_object_is_not_an_error if {
	inp := {"request": testdata.request([testdata.gpu_container]), "namespaceObject": null, "intent": {"gpus": 1}}
	not namespace_mig.decision with input as inp with data.kgwe.cluster as testdata.cluster
}

test_multi_gpu_pods_stay_whole if {
	inp := {"request": testdata.request([testdata.gpu_container]), "namespaceObject": mig_namespace, "intent": {"gpus": 2}}
	not namespace_mig.decision with input as inp with data.kgwe.cluster as testdata.cluster
}
