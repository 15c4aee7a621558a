"""`evaluate`'s answer remembered for pods that differ only in what no policy of the set reads.

With no GPUPolicy and the built-ins answered natively (KGWE's default, with or without admin Rego
policies): the built-ins read the pod's containers, labels and annotations, the namespace's labels, the
intent and the cluster summary, never the pod's identity (policies/engines/native_builtins.py answers in
Python; rego/ reads the same when it answers). The admin Rego policies read what their syntax tree
reaches (policies/engines/rego_reads.py). The replicas of one workload reach `/validate` differing only
in their identity (name, uid, creation time), so the answer is remembered under the exact JSON of the
pod without its identity fields (`IDENTITY_FIELDS`), the namespace object and the intent, followed by the
engine's projected input when admin Rego runs: an admin policy that reads the name sees every replica.
One policy set and one cluster summary per memo, both compared by identity: a new set or a new snapshot
starts it again. A set whose running Rego reads the clock or the network is never remembered.

Bounded: past MEMO_SIZE answers the memo starts again, and a key over MAX_KEY_BYTES is not remembered.
An answer naming an engine failure is never remembered. Every caller gets its own copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from policies.api import PlacementDecision, PolicyContext, Violation
from policies.vocabulary.identity import without_identity

MEMO_SIZE = 256
MAX_KEY_BYTES = 32 * 1024  # with MEMO_SIZE: at most 8 MiB of keys

Answer = tuple[PlacementDecision, list[Violation]]


def identity_free_key(ctx: PolicyContext) -> bytes | None:
    """What the built-ins' answer for `ctx` depends on, as exact JSON; None when it is too large to keep."""
    request = ctx.request
    pod = without_identity(request.get("object") if isinstance(request, Mapping) else None)
    try:
        # In the order the keys came: the API server writes one object's keys in one order (Go's encoder),
        # so replicas give the same bytes; a pod with its keys in another order is only a miss.
        # The workload's usage too: policies may read it, and it changes with each refresh of the table.
        key = orjson.dumps([pod, ctx.namespace_object, ctx.intent, ctx.usage] if ctx.usage is not None
                           else [pod, ctx.namespace_object, ctx.intent])
    except TypeError:
        return None  # not JSON (a pod built in Python with other types): evaluated every time
    return key if len(key) <= MAX_KEY_BYTES else None


def _copy(answer: Answer) -> Answer:
    decision, violations = answer
    return PlacementDecision(dict(decision.fields), dict(decision.decided_by)), list(violations)


class AnswerMemo:
    """Remembered answers of one policy set over one cluster summary (thread-safe: one state swapped whole)."""

    def __init__(self) -> None:
        self._state: tuple[object, object, dict[bytes, Answer]] | None = None

    def _answers(self, policy_set: object, cluster: object) -> dict[bytes, Answer]:
        state = self._state
        if state is None or state[0] is not policy_set or state[1] is not cluster:
            state = self._state = (policy_set, cluster, {})
        return state[2]

    def get(self, policy_set: object, cluster: Mapping[str, Any], key: bytes) -> Answer | None:
        found = self._answers(policy_set, cluster).get(key)
        return None if found is None else _copy(found)

    def put(self, policy_set: object, cluster: Mapping[str, Any], key: bytes, answer: Answer,
            engine_policy: str) -> bool:
        """Remember `answer` under `key`; False when it is not remembered."""
        if any(v.policy == engine_policy for v in answer[1]):
            return False  # an engine failure is the engine's state, not the pod's answer
        answers = self._answers(policy_set, cluster)
        if len(answers) >= MEMO_SIZE:
            answers.clear()
        answers[key] = _copy(answer)
        return True


__all__ = ["MAX_KEY_BYTES", "MEMO_SIZE", "AnswerMemo", "identity_free_key"]
