"""What `evaluate`'s answer is remembered under (policies/runtime/answer_memo.py).
"""

from __future__ import annotations

from policies.api import PolicyContext
from policies.engines.aggregate import EVERYTHING_QUERY
from policies.engines.native_builtins import NativeBuiltins
from policies.engines.projection import Projection
from policies.engines.rego import RegoInput
from policies.loading.policy_set import PolicySet
from policies.runtime.answer_memo import MAX_KEY_BYTES, identity_free_key
from policies.runtime.rego_phase import RegoPhase
from policies.vocabulary.identity import identity_of


class MemoKeys(RegoPhase):
    def _memo_key(self, policy_set: PolicySet, ctx: PolicyContext) -> tuple[bytes | None, RegoInput | None]:
        """What `evaluate`'s answer is remembered under (policies/runtime/answer_memo.py), or None; and the
        engine's input when the key holds it.

        With the built-ins answered natively, an answer is the built-ins' (a function of the pod without
        its identity, the namespace, the intent and the cluster summary) merged with what the other
        policies say: admin Rego and GPUPolicy Rego read the part of the input their syntax tree reaches
        (policies/engines/rego_reads.py), GPUPolicy match rules and CEL expressions the paths their tokens
        name (policies/engines/cel_reads.py). The key holds both parts: replicas share an answer unless a
        policy reads what tells them apart."""
        if not self.native_builtins:
            return None, None
        native = self._native_for(policy_set)
        if native is None:
            return None, None
        key = identity_free_key(ctx)
        if key is None or _identity_free(policy_set, native):
            return key, None
        projection = self._projection(policy_set, native.policies)
        if projection is None or not projection.deterministic:
            return None, None
        engine_input: RegoInput | None = None
        if policy_set.gpu_policies:
            # Which GPUPolicies run is itself a function of what the key holds: the engine's input is
            # built later, once they are known.
            widened = self._widened(policy_set, projection)
            if widened is None:
                return None, None
            # The key holds the pod without its identity, the namespace and the intent whole already: of
            # them, only the identity is left to cut.
            request = ctx.request
            read = RegoInput(widened.apply({"request": {**request, "object": identity_of(request.get("object"))},
                                            "tenant": ctx.tenant}))
        else:
            read = engine_input = RegoInput(projection.apply(self._rego_input(ctx, (), native.policies).document))
        try:
            key = key + b"\n" + read.raw
        except TypeError:
            return None, None
        return (key if len(key) <= MAX_KEY_BYTES else None), engine_input

    def replica_token(self) -> PolicySet | None:
        """The policy set now loaded when `evaluate`'s remembered answers are keyed on `identity_free_key`'s
        inputs alone (the pod without its identity, the namespace object, the intent document, the usage) over
        one cluster summary; None when another policy may read more (an admin Rego or a GPUPolicy), or when
        nothing is remembered. A caller that shows those inputs equal for two requests of one snapshot may
        hand the second the first's answer while this gives the same set (webhook/admission/policy_glue.py)."""
        policy_set = self._set
        if not self.native_builtins:
            return None
        known = self._replica_sets
        if known is None or known[0] is not policy_set:
            native = self._native_for(policy_set)
            shared = (policy_set.prepared is not None and policy_set.has_decision and policy_set.has_check
                      and native is not None and _identity_free(policy_set, native))
            known = self._replica_sets = (policy_set, shared)
        return policy_set if known[1] else None

    def _widened(self, policy_set: PolicySet, projection: Projection) -> Projection | None:
        """`projection` with what the GPUPolicies' match rules and CEL read (built once per set)."""
        cached = self._widening
        if cached is None or cached[0] is not policy_set or cached[1] is not projection:
            cached = self._widening = (policy_set, projection, projection.widened(policy_set.request_reads))
        return cached[2]



def _identity_free(policy_set: PolicySet, native: NativeBuiltins) -> bool:
    """Whether only the built-ins, answered natively, speak for a request of `policy_set`: then an answer is a
    function of `identity_free_key`'s inputs and the cluster summary."""
    return not policy_set.gpu_policies and native.answers((), EVERYTHING_QUERY)
