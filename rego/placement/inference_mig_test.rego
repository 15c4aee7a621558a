package kgwe.placement.inference_mig_test

import data.kgwe.lib.testdata
import data.kgwe.placement.inference_mig
import rego.v1

inference_input(intent) := {
	"request": {"operation": "CREATE", "object": testdata.pod([testdata.gpu_container], {"kgwe.io/workload": "inference"})},
	"namespaceObject": testdata.namespace({}),
	"intent": intent,
}

test_small_inference_pod_gets_smallest_fitting_slice if {
	d := inference_mig.decision with input as inference_input({"gpus": 1, "gpuMemory": 8589934592}) # 8Gi
		with data.kgwe.cluster as testdata.cluster
	d == {"acceleratorTypes": ["nvidia-a100-80gb"], "sharing": {"mode": "mig", "migProfile": "1g.10gb"}}
}

test_twenty_gi_is_the_limit if {
	d := inference_mig.decision with input as inference_input({"gpus": 1, "gpuMemory": 21474836480})
		with data.kgwe.cluster as testdata.cluster
	d.sharing.migProfile == "2g.20gb"
	not inference_mig.decision with input as inference_input({"gpus": 1, "gpuMemory": 21474836481})
		with data.kgwe.cluster as testdata.cluster
}

test_named_type_is_left_alone if {
	not inference_mig.decision with input as inference_input({"gpus": 1, "gpuMemory": 1, "acceleratorTypes": ["nvidia-l4-24gb"]})
		with data.kgwe.cluster as testdata.cluster
}

test_no_mig_in_cluster_no_decision if {
	not inference_mig.decision with input as inference_input({"gpus": 1, "gpuMemory": 1})
		with data.kgwe.cluster as testdata.cluster_without_mig
}

test_training_pods_are_not_inference if {
	inp := {"request": testdata.request([testdata.gpu_container]), "intent": {"gpus": 1, "gpuMemory": 1}}
	not inference_mig.decision with input as inp with data.kgwe.cluster as testdata.cluster
}
