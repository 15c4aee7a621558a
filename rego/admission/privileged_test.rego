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

test_privileged_dra_claim_container_denied if {
	c := {"name": "main", "resources": {"claims": [{"name": "gpu"}]}, "securityContext": {"privileged": true}}
	r := object.union(testdata.request([c]), {"object": {"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}}})
	msgs := privileged.deny with input as {"request": r}
	msgs == {`container "main" uses GPUs and is privileged; privileged containers see every GPU on the node`}
}

test_privileged_dra_extended_resource_denied if {
	c := {"name": "main", "resources": {"limits": {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"}}, "securityContext": {"privileged": true}}
	count(privileged.deny) == 1 with input as {"request": testdata.request([c])}
}

test_privileged_container_in_a_pod_naming_claims_denied if {
	c := {"name": "side", "securityContext": {"privileged": true}}
	r := object.union(testdata.request([c]), {"object": {"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "mine"}]}}})
	msgs := privileged.deny with input as {"request": r}
	msgs == {`container "side" is privileged in a pod that uses GPUs; privileged containers see every GPU on the node`}
}

test_privileged_ephemeral_container_in_a_gpu_pod_denied if {
	debug := {"name": "debugger", "image": "busybox", "securityContext": {"privileged": true}}
	r := object.union(testdata.request([testdata.gpu_container]), {"object": {"spec": {"ephemeralContainers": [debug]}}})
	msgs := privileged.deny with input as {"request": r}
	msgs == {`container "debugger" is privileged in a pod that uses GPUs; privileged containers see every GPU on the node`}
}

test_privileged_ephemeral_container_in_a_cpu_pod_allowed if {
	debug := {"name": "debugger", "securityContext": {"privileged": true}}
	r := object.union(testdata.request([{"name": "web"}]), {"object": {"spec": {"ephemeralContainers": [debug]}}})
	count(privileged.deny) == 0 with input as {"request": r}
}
