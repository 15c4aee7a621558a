"""Profile and accelerator-type RBAC: the in-memory evaluator of Roles and bindings (`evaluator`) and the
SubjectAccessReview client used in a cluster (`review`).
"""
