"""GPUPolicies held by the API server itself: ValidatingAdmissionPolicies generated from CEL GPUPolicies
(docs/policies.md, "Held without the webhook")."""
