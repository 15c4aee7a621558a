package kgwe.admission.memory_limit_test

import data.kgwe.admission.memory_limit
import data.kgwe.lib.testdata
import rego.v1

test_gpu_container_without_memory_limit_warned if {
	c := {"name": "train", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
	memory_limit.warn == {`container "train" uses GPUs but sets no memory limit`} with input as {"request": testdata.request([c])}
}

test_gpu_container_with_memory_limit_quiet if {
	count(memory_limit.warn) == 0 with input as {"request": testdata.request([testdata.gpu_container])}
}
