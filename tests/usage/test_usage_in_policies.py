"""Policies see a pod's workload usage (SPEC section 11, docs/policies.md "Usage"): Rego `input.kgwe.usage`,
CEL `usage`, from the same in-memory table admission reads. An admin denies new pods of a workload that
holds idle GPUs; a GPUPolicy warns when a smaller shape would do."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from test_rightsizing_admission import bare_pod, usage_row
from workload_support import CLUSTER, CONFIG, review

from webhook.admission.request import decode_review
from webhook.assembly import build_runtime
from webhook.config import load_config
from webhook.runtime import Runtime
from webhook.usage.refresher import UsageRefresher
from webhook.usage.table import UsageTable, WorkloadUsage

IDLE_REGO = """
package admin.idle_gpus

import rego.v1

deny contains msg if {
	input.request.operation == "CREATE"
	input.kgwe.usage.idle
	msg := sprintf("%s holds %v idle GPU-equivalents (%d pods): release them before starting more", [
		input.kgwe.usage.workload, input.kgwe.usage.idleGpuEquivalents, input.kgwe.usage.idlePods,
	])
}
"""

SMALLER_CEL = """
apiVersion: kgwe.io/v1alpha1
kind: GPUPolicy
metadata: {name: smaller-would-do}
spec:
  enforcementAction: Warn
  validations:
  - expression: >-
      usage == null || usage.recommendation == null || !usage.recommendation.change
      || usage.recommendation.confidenceLevel != 'high'
    messageExpression: >-
      'peak ' + string(usage.peakMemoryMib) + ' MiB: ' + usage.recommendation.shape + ' would do'
"""


class _NoPrometheus:
    def read_all(self) -> object:
        raise AssertionError("the request path read Prometheus")


@pytest.fixture
def runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Runtime:
    monkeypatch.setenv("KGWE_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "idle_gpus.rego").write_text(IDLE_REGO)
    (tmp_path / "policies" / "smaller.yaml").write_text(SMALLER_CEL)
    config = load_config(CONFIG)
    config = config.model_copy(update={"policies": config.policies.model_copy(
        update={"directories": [str(tmp_path / "policies")]})})
    built = build_runtime(config, CLUSTER)
    built.usage = UsageRefresher(_NoPrometheus(), lambda: built.config, built.store.snapshot)  # type: ignore[arg-type]
    return built


def _table(runtime: Runtime, *rows: WorkloadUsage) -> None:
    assert runtime.usage is not None
    runtime.usage.set_table(UsageTable(time.time(), time.time(), {r.workload: r for r in rows}))


def _validate(runtime: Runtime, name: str) -> tuple[bool, str, list[str]]:
    request = decode_review(review(bare_pod(name=name), user="alice", groups=("team-a",)))
    mutated = runtime.admission.mutate(request)
    assert mutated.allowed and mutated.object is not None
    body = review(mutated.object, user="alice", groups=("team-a",))
    answer = runtime.admission.validate(decode_review(body))
    return answer.allowed, answer.message, answer.warnings


def test_an_admin_rego_policy_denies_new_pods_of_a_workload_with_idle_gpus(runtime: Runtime) -> None:
    _table(runtime, usage_row("Pod/team-a/notebook", idle=True), usage_row("Pod/team-a/busy"))
    allowed, message, _ = _validate(runtime, "notebook")
    assert not allowed
    assert "Pod/team-a/notebook holds 1 idle GPU-equivalents (1 pods): release them before starting more" in message
    allowed, _, warnings = _validate(runtime, "busy")
    assert allowed
    # The same table, read by CEL: a smaller shape would do.
    assert any("peak 14210 MiB: nvidia-a100-80gb MIG 3g.40gb would do" in w for w in warnings), warnings


def test_without_usage_the_policies_see_none_and_admit(runtime: Runtime) -> None:
    allowed, _, warnings = _validate(runtime, "notebook")  # no table yet
    assert allowed
    assert not any("would do" in w for w in warnings)
    _table(runtime, usage_row("Pod/team-a/other", idle=True))  # a table without this workload
    allowed, _, _ = _validate(runtime, "notebook")
    assert allowed


def test_usage_is_part_of_the_remembered_answers(runtime: Runtime) -> None:
    # The same pod judged before and after its workload turns idle: the answer memo must not serve the old one.
    _table(runtime, usage_row("Pod/team-a/notebook"))
    assert _validate(runtime, "notebook")[0]
    _table(runtime, usage_row("Pod/team-a/notebook", idle=True))
    assert not _validate(runtime, "notebook")[0]
