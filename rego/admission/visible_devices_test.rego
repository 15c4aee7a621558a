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
