package kgwe.placement.nvlink_test

import data.kgwe.lib.testdata
import data.kgwe.placement.nvlink
import rego.v1

test_multi_gpu_on_nvswitch_type_needs_nvlink if {
	d := nvlink.decision with input as {"intent": {"gpus": 4, "acceleratorTypes": ["nvidia-h100-80gb"]}}
		with data.kgwe.cluster as testdata.cluster
	d == {"topology": "nvlink"}
}

test_any_type_without_nvswitch_means_no_decision if {
	not nvlink.decision with input as {"intent": {"gpus": 2, "acceleratorTypes": ["nvidia-h100-80gb", "nvidia-l4-24gb"]}}
		with data.kgwe.cluster as testdata.cluster
}

test_no_type_counts_types_large_enough if {
	# Only the 8-GPU types can hold 4 GPUs, and all of them have NVSwitch.
	d := nvlink.decision with input as {"intent": {"gpus": 4}} with data.kgwe.cluster as testdata.cluster
	d.topology == "nvlink"
	not nvlink.decision with input as {"intent": {"gpus": 2}} with data.kgwe.cluster as testdata.cluster
}

test_single_gpu_and_user_topology_untouched if {
	not nvlink.decision with input as {"intent": {"gpus": 1, "acceleratorTypes": ["nvidia-h100-80gb"]}}
		with data.kgwe.cluster as testdata.cluster
	not nvlink.decision with input as {"intent": {"gpus": 4, "topology": "none", "acceleratorTypes": ["nvidia-h100-80gb"]}}
		with data.kgwe.cluster as testdata.cluster
}
