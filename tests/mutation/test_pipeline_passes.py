"""The pipeline judges a pass after the first whole (one serialisation) and a step's change by its plain bytes
(sorted only where needed); strict mode judges every step of every pass by its own diff. Both must give the same
result: the same pod, patch, changed steps and passes, and the same errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from placement_support import Admit, load_pod

from webhook.intent import parse_intent
from webhook.mutation.mutators import MutatorRegistry
from webhook.mutation.pipeline import NotConverging, PipelineResult, Step, run_pipeline, strict_ownership
from webhook.mutation.steps import placement_steps
from webhook.placement.plan import build_plan

_EXAMPLES = sorted(p.name for p in (Path(__file__).resolve().parents[2] / "examples" / "pods").glob("*.yaml"))


@pytest.fixture
def registry(request: pytest.FixtureRequest) -> Iterator[MutatorRegistry]:
    made = MutatorRegistry(f"test-{request.node.name}")
    yield made
    for mutator in made.mutators:
        made.unregister(mutator.name)


def _both(pod: dict[str, Any], steps: list[Step]) -> tuple[PipelineResult, PipelineResult]:
    with strict_ownership(False):
        fast = run_pipeline(pod, steps)
    with strict_ownership(True):
        exact = run_pipeline(pod, steps)
    return fast, exact


def _same(fast: PipelineResult, exact: PipelineResult) -> None:
    assert orjson.dumps(fast.pod) == orjson.dumps(exact.pod)  # the keys' order too
    assert fast.patch == exact.patch
    assert fast.changed_steps == exact.changed_steps
    assert fast.passes == exact.passes


@pytest.mark.parametrize("name", _EXAMPLES)
def test_every_example_pods_mutation_is_the_step_by_step_one(admit: Admit, name: str) -> None:
    with strict_ownership(False):
        fast = admit.mutate(load_pod(name))
    with strict_ownership(True):
        exact = admit.mutate(load_pod(name))
    assert fast.patch == exact.patch and fast.warnings == exact.warnings and fast.allowed == exact.allowed
    runtime = admit.runtime
    pod = load_pod(name)
    plan = build_plan(pod, parse_intent(pod), None, runtime.store.snapshot(), runtime.config)
    _same(*_both(pod, placement_steps(plan)))


def _pod() -> dict[str, Any]:
    return {"metadata": {"name": "p", "labels": {"a": "1", "b": "2"}}, "spec": {"containers": [{"name": "c"}]}}


def test_a_step_changing_only_in_a_later_pass_is_named(registry: MutatorRegistry) -> None:
    # `echo` copies the gates into a label; `gates` adds one after it: the second pass changes the pod (echo),
    # a third finds the fixpoint. The pass judged whole is run again step by step to name echo.
    echo = registry.register("t-echo", ["/metadata/labels/echo"])
    gates = registry.register("t-gates", ["/spec/schedulingGates"])

    def copy_gates(pod: dict[str, Any]) -> None:
        pod["metadata"]["labels"]["echo"] = str(len(pod["spec"].get("schedulingGates", [])))

    def add_gate(pod: dict[str, Any]) -> None:
        pod["spec"]["schedulingGates"] = [{"name": "g"}]

    fast, exact = _both(_pod(), [echo.step(copy_gates), gates.step(add_gate)])
    _same(fast, exact)
    assert fast.passes == 3 and fast.changed_steps == ["t-echo", "t-gates"]
    assert fast.pod["metadata"]["labels"]["echo"] == "1"


def test_a_mapping_rebuilt_in_another_order_is_no_change(registry: MutatorRegistry) -> None:
    labels = registry.register("t-labels", ["/metadata/labels"])

    def reverse(pod: dict[str, Any]) -> None:
        pod["metadata"]["labels"] = dict(reversed(list(pod["metadata"]["labels"].items())))

    fast, exact = _both(_pod(), [labels.step(reverse)])
    _same(fast, exact)
    assert fast.changed_steps == [] and fast.patch == [] and fast.passes == 1


def test_a_value_changed_to_one_as_long_is_a_change(registry: MutatorRegistry) -> None:
    # The plain bytes differ but are as long: only the sorted ones tell a change from a new order.
    labels = registry.register("t-labels", ["/metadata/labels"])

    def swap(pod: dict[str, Any]) -> None:
        pod["metadata"]["labels"] = {"b": "1", "a": "1"}

    fast, exact = _both(_pod(), [labels.step(swap)])
    _same(fast, exact)
    assert fast.changed_steps == ["t-labels"] and fast.patch == [
        {"op": "replace", "path": "/metadata/labels/b", "value": "1"}]


def test_steps_that_never_settle_do_not_converge_either_way(registry: MutatorRegistry) -> None:
    counter = registry.register("t-counter", ["/metadata/labels/n"])

    def count(pod: dict[str, Any]) -> None:
        labels = pod["metadata"]["labels"]
        labels["n"] = str(int(labels.get("n", "0")) + 1)

    for strict in (False, True):
        with strict_ownership(strict), pytest.raises(NotConverging, match="t-counter"):
            run_pipeline(_pod(), [counter.step(count)])
