"""Mutators declare the JSON paths they own: overlapping declarations are refused when registered, and a
step that writes outside its mutator's paths is caught by the pipeline."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from placement_support import Admit, load_pod

from webhook.intent import parse_intent
from webhook.mutation.mutators import CREATE, UPDATE, MutatorRegistry, OwnershipConflict, OwnershipViolation
from webhook.mutation.pipeline import run_pipeline, strict_ownership
from webhook.mutation.steps import placement_steps
from webhook.placement.plan import build_plan


@pytest.fixture
def registry(request: pytest.FixtureRequest) -> Iterator[MutatorRegistry]:
    """A throwaway pipeline; its mutators are removed afterwards (names are global)."""
    made = MutatorRegistry(f"test-{request.node.name}")
    yield made
    for mutator in made.mutators:
        made.unregister(mutator.name)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("/spec/affinity", "/spec/affinity/nodeAffinity"),  # a subtree of another's
        ("/spec/containers/*/env", "/spec/containers/0"),  # a wildcard token meets an index
        ("/metadata/annotations/kgwe.io~1*", "/metadata/annotations/kgwe.io~1tenant"),  # a key prefix
        ("/spec/tolerations", "/spec/tolerations"),  # the same path
    ],
)
def test_overlapping_paths_are_refused_at_registration_naming_both(
    registry: MutatorRegistry, first: str, second: str
) -> None:
    registry.register("t-first", [first])
    with pytest.raises(OwnershipConflict) as raised:
        registry.register("t-second", [second])
    assert "'t-first'" in str(raised.value) and "'t-second'" in str(raised.value)
    assert [m.name for m in registry.mutators] == ["t-first"]


def test_disjoint_paths_register(registry: MutatorRegistry) -> None:
    registry.register("t-kgwe-keys", ["/metadata/annotations/kgwe.io~1*"])
    registry.register("t-kueue-key", ["/metadata/annotations/kueue.x-k8s.io~1podset-required-topology"])
    registry.register("t-env", ["/spec/containers/*/env"])
    registry.register("t-resources", ["/spec/containers/*/resources"])
    assert registry.owner_of("/spec/containers/3/env/0") == "t-env"
    assert registry.owner_of("/metadata/annotations/kgwe.io~1decision") == "t-kgwe-keys"
    assert registry.owner_of("/metadata/labels/app") is None


def test_a_mutator_name_is_registered_once(registry: MutatorRegistry) -> None:
    with pytest.raises(OwnershipConflict, match="node-constraints"):
        registry.register("node-constraints", ["/spec/priorityClassName"])


def test_the_built_in_mutators_own_disjoint_paths() -> None:
    # Registration already refused any overlap; this names what each pipeline's mutators are.
    assert [m.name for m in CREATE.mutators] == [
        "output-annotations", "rightsizing", "output-labels", "node-constraints", "gpu-resources", "profile-queue",
        "mps-env", "gang", "scheduling-gates", "scheduling-group",
    ]
    assert [m.name for m in UPDATE.mutators] == ["kgwe-keys-fixed"]
    for a, b in itertools.combinations(CREATE.mutators, 2):
        assert not any(x.overlaps(y) for x in a.owns for y in b.owns), (a.name, b.name)


def _pod() -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}


def test_a_write_no_mutator_owns_is_caught(registry: MutatorRegistry) -> None:
    tolerate = registry.register("t-tolerate", ["/spec/tolerations"])

    def step(pod: dict[str, Any]) -> None:
        pod["spec"]["tolerations"] = [{"operator": "Exists"}]
        pod["spec"]["priorityClassName"] = "high"  # not declared

    # The check every run makes, on the final patch (this folder runs strict mode by default).
    with strict_ownership(False), pytest.raises(OwnershipViolation, match="/spec/priorityClassName changed, and no "
                                                "mutator owns it"):
        run_pipeline(_pod(), [tolerate.step(step)])
    with pytest.raises(OwnershipViolation, match="t-tolerate wrote /spec/priorityClassName, which is owned by no"):
        run_pipeline(_pod(), [tolerate.step(step)])


def test_a_write_to_another_mutators_path_is_caught(registry: MutatorRegistry) -> None:
    labels = registry.register("t-labels", ["/metadata/labels"])
    gates = registry.register("t-gates", ["/spec/schedulingGates"])

    def labels_and_gates(pod: dict[str, Any]) -> None:
        pod["metadata"]["labels"] = {"a": "b"}
        pod["spec"].setdefault("schedulingGates", [{"name": "x"}])  # t-gates' path

    def no_gates(pod: dict[str, Any]) -> None:
        return None

    # The final patch alone shows it: t-gates' path changed, and t-gates changed nothing.
    with strict_ownership(False), pytest.raises(OwnershipViolation, match="it is t-gates's, which did not change it"):
        run_pipeline(_pod(), [labels.step(labels_and_gates), gates.step(no_gates)])

    def gates_too(pod: dict[str, Any]) -> None:
        gates = pod["spec"].setdefault("schedulingGates", [])
        if {"name": "y"} not in gates:
            gates.append({"name": "y"})

    # Both changed the pod: only strict mode (each step's own diff) can name the culprit.
    with strict_ownership(False):
        run_pipeline(_pod(), [labels.step(labels_and_gates), gates.step(gates_too)])
    with pytest.raises(OwnershipViolation, match="t-labels wrote /spec/schedulingGates, which is 't-gates's"):
        run_pipeline(_pod(), [labels.step(labels_and_gates), gates.step(gates_too)])


def test_an_undeclared_step_is_refused() -> None:
    with pytest.raises(OwnershipViolation, match="declare no paths"):
        run_pipeline(_pod(), [("t-undeclared", lambda pod: None)])


def test_a_parent_added_whole_is_judged_piece_by_piece(admit: Admit) -> None:
    # A gang pod without affinity: `/spec/affinity` is added whole, holding node-constraints'
    # nodeAffinity and the gang's podAffinity; the annotations map likewise.
    mutated = admit.mutate(load_pod("09-gang.yaml"))
    owners = {CREATE.owner_of(op["path"]) for op in mutated.patch}
    assert None in owners  # parents added whole: owned by nobody as a whole
    parents = {op["path"] for op in mutated.patch if CREATE.owner_of(op["path"]) is None}
    assert "/spec/affinity" in parents


def test_rendering_a_plan_alone_stays_within_its_mutators(admit: Admit) -> None:
    # /validate runs the plan's steps alone to see what /mutate should have written.
    runtime = admit.runtime
    pod = load_pod("09-gang.yaml")
    plan = build_plan(pod, parse_intent(pod), None, runtime.store.snapshot(), runtime.config)
    result = run_pipeline(pod, placement_steps(plan))
    assert {"node-constraints", "output-labels", "gang"} <= set(result.changed_steps)
    assert any(op["path"].startswith("/metadata/labels") for op in result.patch)
