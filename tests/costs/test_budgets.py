"""Budgets (SPEC section 12) through real AdmissionReview JSON over HTTP: a tenant whose projected month-end
spend passes a threshold gets a warning (Warn, and every warnAt), a refusal at /validate (Deny), or its new
pods wait behind the quota gate, which the quota controller does not lift while the budget is passed
(Queue); each message carries the figures. The test cluster of spend_cluster.py: team-a spent 508.50 this
month and runs 4.50 an hour now."""

from __future__ import annotations

import base64
import copy
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest
from prometheus_client import REGISTRY
from spend_cluster import EXPECTED_MONTH_SPENT, pick_now, write_cluster
from starlette.testclient import TestClient

from policies.quota.budget import BudgetSpec, BudgetState, judge
from policies.quota.queue import Ask, Waiter, plan_queue
from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.quotas.controller import QuotaController
from webhook.review import create_review
from webhook.runtime import Runtime
from webhook.server.app import create_app
from webhook.spend.service import BudgetBook, SpendService
from webhook.spend.window import month_of

NOW = pick_now()
HOURS_LEFT = Decimal(int(month_of(NOW)[1] - NOW)) / 3600
PROJECTED = EXPECTED_MONTH_SPENT["team-a"] + Decimal("4.50") * HOURS_LEFT
CENT = Decimal("0.01")


def cents(value: Decimal) -> str:
    return f"{value.quantize(CENT, rounding=ROUND_HALF_UP)}"


class _Loaded:
    loaded = True


def runtime_with(tmp_path: Path, monthly: Decimal, action: str) -> Runtime:
    budget = {"monthly": str(monthly.quantize(CENT)), "warnAt": [0.8], "action": action}
    directory, config_file = write_cluster(tmp_path, NOW, budget)
    runtime = build_runtime(load_config(config_file), directory, load_policies=False)
    service = SpendService(lambda: runtime.config, runtime.store.snapshot, clock=lambda: NOW)
    runtime.budgets = BudgetBook(service, lambda: runtime.config)
    return runtime


def gpu_pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "team-a",
                         "annotations": {"kgwe.io/accelerator": "nvidia-h100-80gb"}},
            "spec": {"containers": [{"name": "main", "image": "cuda",
                                     "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}


def admit(runtime: Runtime, pod: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """/mutate then /validate over HTTP, as the API server calls them; (the stored pod, /validate's response)."""
    app = create_app(runtime, ui=False, certificate=_Loaded())
    with TestClient(app) as client:
        review = create_review(pod, "alice", [])
        mutated = client.post("/mutate", content=orjson.dumps(review)).json()["response"]
        assert mutated["allowed"], mutated
        patch = orjson.loads(base64.b64decode(mutated["patchType"] and mutated["patch"]))
        stored = jsonpatch.apply_patch(copy.deepcopy(pod), patch)
        validated = client.post("/validate", content=orjson.dumps(create_review(stored, "alice", []))).json()
    return stored, validated["response"]


def figures(ratio: str) -> list[str]:
    return [f"projected month-end spend {cents(PROJECTED)} USD", "spent 508.50", "4.50 USD/h",
            f"is {ratio} of the monthly budget"]


def test_warn_at_a_threshold_below_the_budget(tmp_path: Path) -> None:
    runtime = runtime_with(tmp_path, PROJECTED / Decimal("0.9"), "Deny")
    _stored, response = admit(runtime, gpu_pod("p"))
    assert response["allowed"]
    warning = next(w for w in response.get("warnings", []) if "budget" in w)
    assert warning == (f"KGWE: budget warning: team-a projects {cents(PROJECTED)} of "
                       f"{cents(PROJECTED / Decimal('0.9'))} USD (90%; spent 508.50, 4.50/h)")


def test_warn_action_past_the_budget_admits_with_the_figures(tmp_path: Path) -> None:
    runtime = runtime_with(tmp_path, PROJECTED / 2, "Warn")
    _stored, response = admit(runtime, gpu_pod("p"))
    assert response["allowed"]
    warning = " ".join(response.get("warnings", []))
    assert "budget exceeded" in warning and "200%" in warning


def test_deny_refuses_new_gpu_pods_with_the_figures(tmp_path: Path) -> None:
    runtime = runtime_with(tmp_path, PROJECTED / 2, "Deny")
    _stored, response = admit(runtime, gpu_pod("p"))
    assert not response["allowed"]
    message = response["status"]["message"]
    assert "budget exceeded: team-a:" in message and "(budget.action: Deny)" in message
    for part in figures("200%"):
        assert part in message
    # Another tenant without a budget is not touched.
    other = gpu_pod("q")
    other["metadata"]["namespace"] = "team-b"
    assert admit(runtime, other)[1]["allowed"]


class Recorder:
    def __init__(self) -> None:
        self.released: list[str] = []
        self.told: dict[str, str] = {}

    def release(self, pod: dict[str, Any], patch: dict[str, Any]) -> None:
        self.released.append(pod["metadata"]["name"])

    def waiting(self, pod: dict[str, Any], message: str, *, event: bool = True) -> None:
        self.told[pod["metadata"]["name"]] = message

    def status(self, quota: str, status: dict[str, Any]) -> None:
        pass


@pytest.mark.parametrize(("share", "held"), [(Decimal("0.5"), True), (Decimal("2"), False)])
def test_queue_holds_the_tenants_pods_behind_the_quota_gate_while_the_budget_is_passed(
    tmp_path: Path, share: Decimal, held: bool
) -> None:
    runtime = runtime_with(tmp_path, PROJECTED * share, "Queue")
    stored, response = admit(runtime, gpu_pod("p"))
    assert "kgwe.io/quota" in [g["name"] for g in stored["spec"]["schedulingGates"]]
    assert response["allowed"]
    warnings = " ".join(response.get("warnings", []))
    assert ("; new GPU pods wait" in warnings) is held
    stored["metadata"].update(uid="uid-p", creationTimestamp="2026-01-01T00:00:00Z", resourceVersion="1")
    runtime.store.upsert(stored)
    recorder = Recorder()
    controller = QuotaController(runtime.store, runtime.config, recorder, budgets=runtime.budgets.states)
    result = controller.reconcile_once()
    if held:  # neither the new pod nor the one that waited before it
        assert recorder.released == []
        message = recorder.told["p"]
        assert message.startswith("team-a: budget exceeded: team-a: projected month-end spend")
        assert message.endswith("; 2nd in line") and "(budget.action: Queue)" in message
        for part in figures("200%"):
            assert part in message
        assert result.waiting["team-a/p"] == message and "team-a/waiting" in result.waiting
    else:
        assert sorted(recorder.released) == ["p", "waiting"]
    if controller._timer is not None:
        controller._timer.cancel()


def test_the_queue_hold_is_pure_and_keeps_the_order() -> None:
    asks = [Waiter(f"pod team-a/{n}", (Ask(f"team-a/{n}", None, ("t",), None, Decimal(1), Decimal(0)),), (o, n))
            for n, o in (("b", "2"), ("a", "1"))]
    queue = plan_queue("team-a", [], [], asks, hold="budget exceeded")
    assert queue.releases == [] and [(w.waiter.label, w.position) for w in queue.waits] == [
        ("pod team-a/a", 1), ("pod team-a/b", 2)]


def test_budget_judgement_and_metrics(tmp_path: Path) -> None:
    spec = BudgetSpec.model_validate({"monthly": "1000", "warnAt": [0.5, 0.8], "action": "Queue"})
    state = BudgetState("t", spec, Decimal("400"), Decimal("1"), Decimal("150"), "USD", "2026-12-01T00:00:00Z")
    assert state.projected == Decimal("550") and state.level == "warn" and state.threshold == Decimal("0.5")
    assert judge(state).effect == "allow" and "55%" in str(judge(state).warning)
    runtime = runtime_with(tmp_path, PROJECTED / 2, "Deny")
    runtime.budgets.refresh()
    assert REGISTRY.get_sample_value("kgwe_budget_exceeded", {"tenant": "team-a", "action": "Deny"}) == 1.0
    assert REGISTRY.get_sample_value("kgwe_budget_ratio", {"tenant": "team-a"}) == pytest.approx(2.0)
    assert REGISTRY.get_sample_value("kgwe_budget_spent", {"tenant": "team-a"}) == pytest.approx(508.5)


def test_the_budgets_refresh_says_what_the_month_says_and_reads_no_pod_without_a_budget(tmp_path: Path) -> None:
    """`budget_states` (what admission and the quota controller read) against the month's figures the costs page
    shows: the same states, team-a's budget judged and team-b's none; with no budget anywhere no pod is read."""
    runtime = runtime_with(tmp_path / "budgeted", PROJECTED / 2, "Warn")
    service = runtime.budgets.service
    assert service.budget_states() == service.month().states
    assert list(service.budget_states()) == ["team-a"]
    assert service.budget_states()["team-a"].spent == EXPECTED_MONTH_SPENT["team-a"]
    directory, config_file = write_cluster(tmp_path / "unbudgeted", NOW)
    plain = build_runtime(load_config(config_file), directory, load_policies=False)
    unread = SpendService(lambda: plain.config, plain.store.snapshot, clock=lambda: NOW)
    assert unread.budget_states() == {}
    assert unread.rates.computed == 0 and not unread.rates._entries  # no pod was rated
    assert unread.month().states == {} and unread.rates.computed > 0
