"""What tells replicas of one workload apart (their identity: name, uid, creation time and the like), and
a pod without it: the key under which answers are remembered for replicas.
"""

from __future__ import annotations

from typing import Any

# What tells the replicas of one workload apart: metadata no placement and no built-in policy reads
# (tests/placement/test_plan_memo.py, tests/policies/test_answer_memo.py).
IDENTITY_FIELDS = frozenset(
    {"name", "generateName", "uid", "creationTimestamp", "resourceVersion", "generation", "managedFields", "selfLink"}
)


def without_identity(obj: Any) -> Any:
    """`obj` without its metadata's IDENTITY_FIELDS: a shallow copy when it has any (every other part is
    the object's own), else `obj` itself."""
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    if not isinstance(metadata, dict) or IDENTITY_FIELDS.isdisjoint(metadata):
        return obj
    return {**obj, "metadata": {k: v for k, v in metadata.items() if k not in IDENTITY_FIELDS}}


def identity_of(obj: Any) -> dict[str, Any]:
    """What `without_identity` leaves out of `obj`: `{"metadata": {...its IDENTITY_FIELDS...}}`, or `{}`
    when it leaves nothing out. The two together hold all of `obj`."""
    metadata = obj.get("metadata") if isinstance(obj, dict) else None
    identity = {k: v for k, v in metadata.items() if k in IDENTITY_FIELDS} if isinstance(metadata, dict) else {}
    return {"metadata": identity} if identity else {}
