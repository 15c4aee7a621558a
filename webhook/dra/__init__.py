"""Dynamic Resource Allocation (`resource.k8s.io/v1`): DRA devices as cluster facts, and KGWE's intent
rendered as ResourceClaimTemplates and pod resource claims. See docs/dra.md."""
