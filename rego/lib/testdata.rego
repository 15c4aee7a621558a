# Fixtures shared by the built-in library's tests: a cluster summary and pods.
package kgwe.lib.testdata

import rego.v1

cluster := {
	"types": {
		"nvidia-a100-80gb": {
			"nodes": 2, "gpus": 12, "maxGpusPerNode": 8, "maxNvlinkDomain": 8, "nvswitch": true, "memoryGB": 80,
			"mig": {
				"1g.10gb": {"devices": 28, "memoryGB": 10},
				"2g.20gb": {"devices": 8, "memoryGB": 20},
				"3g.40gb": {"devices": 8, "memoryGB": 40},
			},
		},
		"nvidia-a100-40gb": {
			"nodes": 1, "gpus": 8, "maxGpusPerNode": 8, "maxNvlinkDomain": 8, "nvswitch": true, "memoryGB": 40,
			"mig": {"1g.5gb": {"devices": 14, "memoryGB": 5}, "3g.20gb": {"devices": 4, "memoryGB": 20}},
		},
		"nvidia-h100-80gb": {
			"nodes": 2, "gpus": 16, "maxGpusPerNode": 8, "maxNvlinkDomain": 8, "nvswitch": true, "memoryGB": 80,
			"mig": {},
		},
		"nvidia-l4-24gb": {
			"nodes": 2, "gpus": 4, "maxGpusPerNode": 2, "maxNvlinkDomain": 1, "nvswitch": false, "memoryGB": 24,
			"mig": {},
		},
	},
	"typeIds": ["nvidia-a100-40gb", "nvidia-a100-80gb", "nvidia-h100-80gb", "nvidia-l4-24gb"],
	"nodes": 7,
}

cluster_without_mig := {"types": {"nvidia-h100-80gb": cluster.types["nvidia-h100-80gb"]}, "nodes": 2}

gpu_container := {
	"name": "main", "image": "cuda",
	"resources": {"limits": {"nvidia.com/gpu": "1", "memory": "16Gi"}},
}

pod(containers, labels) := {
	"apiVersion": "v1", "kind": "Pod",
	"metadata": {"name": "p", "namespace": "team-a", "labels": labels, "annotations": {}},
	"spec": {"containers": containers},
}

request(containers) := {"operation": "CREATE", "namespace": "team-a", "object": pod(containers, {})}

namespace(labels) := {"metadata": {"name": "team-a", "labels": labels}}
