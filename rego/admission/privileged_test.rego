package kgwe.admission.privileged_test

import data.kgwe.admission.privileged
import data.kgwe.lib.testdata
import rego.v1

test_privileged_gpu_container_denied if {
	c := object.union(testdata.gpu_container, {"securityContext": {"privileged": true}})
	msgs := privileged.deny with input as {"request": testdata.request([c])}
	msgs == {`container "main" uses GPUs and is privileged; privileged containers see every GPU on the node`}
}

test_privileged_container_without_gpu_allowed if {
	c := {"name": "debug", "securityContext": {"privileged": true}}
	count(privileged.deny) == 0 with input as {"request": testdata.request([c])}
}

test_unprivileged_gpu_container_allowed if {
	count(privileged.deny) == 0 with input as {"request": testdata.request([testdata.gpu_container])}
}
