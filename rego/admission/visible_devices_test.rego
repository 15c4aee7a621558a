package kgwe.admission.visible_devices_test

import data.kgwe.admission.visible_devices
import data.kgwe.lib.testdata
import rego.v1

test_visible_devices_without_gpu_denied if {
	c := {"name": "sneaky", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
	visible_devices.deny == {`container "sneaky" sets NVIDIA_VISIBLE_DEVICES="all" without asking for a GPU`} with input as {"request": testdata.request([c])}
}

test_void_and_gpu_containers_allowed if {
	void := {"name": "cpu", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]}
	gpu := object.union(testdata.gpu_container, {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]})
	count(visible_devices.deny) == 0 with input as {"request": testdata.request([void, gpu])}
}

test_a_zero_gpu_limit_gives_no_gpu_so_the_variable_is_refused if {
	c := {"name": "zero", "resources": {"limits": {"nvidia.com/gpu": "0", "memory": "1Gi"}}, "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
	visible_devices.deny == {`container "zero" sets NVIDIA_VISIBLE_DEVICES="all" without asking for a GPU`} with input as {"request": testdata.request([c])}
}

test_a_value_from_elsewhere_is_refused if {
	c := {"name": "cm", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "devices"}}}]}
	visible_devices.deny == {`container "cm" takes NVIDIA_VISIBLE_DEVICES from valueFrom without asking for a GPU`} with input as {"request": testdata.request([c])}
}
