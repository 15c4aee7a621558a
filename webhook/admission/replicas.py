"""Validation results remembered with a remembered plan: the replicas of one workload are judged once.

`webhook/placement/memo.py` plans a pod without its identity fields and remembers the plan per snapshot
and configuration, under the exact pod (without identity), intent, GPU demand and policy decision. A
check that reads nothing else (the pod's spec and `kgwe.io/` keys, the plan, the snapshot and the
configuration) is the same for every pod with that key, so it is computed once, *on the pod without its
identity* (the key is then complete by construction), and kept in the memo entry. The placement check of
`/validate` (the plan's refusals, the user's contradicting constraints, a mutation that did not happen,
no node that could ever run the pod) is such a check; tenancy, ownership of outputs, RBAC and quota are
not (they depend on who asks, and on the moment).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from webhook.admission.facts import Facts, Problem
from webhook.config import Config


def remembered(facts: Facts, name: str, config: Config, check: Callable[[Facts], list[Problem]]) -> list[Problem]:
    """`check(facts)`, computed once per plan memo entry under `name`; `check` must read only the pod,
    its intent, demand and decision, the plan, the snapshot and `config`. Computed afresh when the plan
    was not remembered or was planned under another configuration than `config`."""
    entry = facts.plan_memo
    if entry is None or entry.config is not config or not isinstance(entry.pod.raw, dict):
        return check(facts)
    found = entry.derived.get(name)
    if found is None:
        # The pod without its identity: what the key holds, so the answer holds for every pod with the key.
        found = entry.derived[name] = tuple(check(replace(facts, pod=entry.pod.raw)))
    return list(found)
