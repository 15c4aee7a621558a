package kgwe.lib.pod_test

import data.kgwe.lib.pod
import data.kgwe.lib.testdata
import rego.v1

test_gpu_containers_include_init_and_mig if {
	init := {"name": "init", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}
	plain := {"name": "sidecar", "resources": {"limits": {"cpu": "1"}}}
	p := testdata.pod([testdata.gpu_container, plain], {})
	names := {c.name | some c in pod.gpu_containers} with input as {"request": {"object": object.union(p, {"spec": {"containers": [testdata.gpu_container, plain], "initContainers": [init]}})}}
	names == {"main", "init"}
}

test_intent_absent_treats_null_as_absent if {
	pod.intent_absent("sharing") with input as {"intent": {"sharing": null}}
	pod.intent_absent("sharing") with input as {"intent": {}}
	not pod.intent_absent("sharing") with input as {"intent": {"sharing": "mps"}}
}

test_smallest_mig_picks_least_memory_then_fewest_slices if {
	pod.smallest_mig(0, []) == ["1g.5gb", ["nvidia-a100-40gb"]] with data.kgwe.cluster as testdata.cluster
	pod.smallest_mig(6000000000, []) == ["1g.10gb", ["nvidia-a100-80gb"]] with data.kgwe.cluster as testdata.cluster
	pod.smallest_mig(15000000000, []) == ["2g.20gb", ["nvidia-a100-80gb"]] with data.kgwe.cluster as testdata.cluster
}

test_smallest_mig_respects_allowed_types if {
	pod.smallest_mig(0, ["nvidia-a100-80gb"]) == ["1g.10gb", ["nvidia-a100-80gb"]] with data.kgwe.cluster as testdata.cluster
}

test_no_mig_offer_is_undefined if {
	not pod.smallest_mig(0, []) with data.kgwe.cluster as testdata.cluster_without_mig
}

test_inference_from_label_or_annotation if {
	pod.is_inference with input as {"request": {"object": {"metadata": {"labels": {"kgwe.io/workload": "inference"}}}}}
	pod.is_inference with input as {"request": {"object": {"metadata": {"annotations": {"kgwe.io/workload": "inference"}}}}}
	not pod.is_inference with input as {"request": {"object": {"metadata": {"labels": {}}}}}
}

test_gpus_through_dra_make_gpu_containers_and_gpu_pods if {
	extended := {"name": "ext", "resources": {"limits": {"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"}}}
	claimed := {"name": "claimed", "resources": {"claims": [{"name": "gpu"}]}}
	plain := {"name": "plain"}
	p := testdata.pod([extended, claimed, plain], {})
	names := {c.name | some c in pod.gpu_containers} with input as {"request": {"object": p}}
	names == {"ext", "claimed"}
	naming := object.union(testdata.pod([plain], {}), {"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]}})
	pod.is_gpu_pod with input as {"request": {"object": naming}}
	not pod.is_gpu_pod with input as {"request": {"object": testdata.pod([plain], {})}}
}
