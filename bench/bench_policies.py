"""Policy evaluation benchmark: the built-in default set plus the example admin policies
(`examples/policies/`) on a typical ~4.7 KB GPU pod AdmissionReview request (bench/data/).

Measured per request, as the webhooks call it:
- `check`  (/validate): match rules, CEL validations of the matching GPUPolicies, one Rego query.
- `decide` (/mutate):   match rules, one Rego query for the placement decision document.
and per engine, on exactly the same policies and input:
- Rego: the embedded regorus (default), OPA's Go engine in-process (reference), the 2024 regorus build,
  and the OPA-server client path (opa-python-client over loopback HTTP to a stand-in server that answers
  with regorus: the REST hop only, since no `opa` binary is available here).
- CEL: cel-expr-python (default) and cel-python, the example policies' match conditions and validations.
The baseline, measured in the same run, is an orjson round trip of the request (parse + serialise),
the floor of any per-request work. Conformance counts for every engine come from the same run.

Run: `.venv/bin/python bench/bench_policies.py` (prints JSON).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

_ROOT = Path(__file__).resolve().parents[1]
for _path in (_ROOT, _ROOT / "tests" / "policies"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from policies.api import PolicyContext  # noqa: E402
from policies.engines.aggregate import CHECK_QUERY  # noqa: E402
from policies.engines.cel import build_cel_engine  # noqa: E402
from policies.engines.conformance import (  # noqa: E402
    hobofan_regorus_runner,
    load_cases,
    regorus_rvm_runner,
    run_cel_cases,
    run_rego_cases,
    served_vm_runner,
    supported_rego_runner,
)
from policies.engines.rego import RegoInput  # noqa: E402
from policies.engines.rego_opa import opa_go_available  # noqa: E402
from policies.engines.rego_rvm import rego_evaluator  # noqa: E402
from policies.runtime.policy_runtime import PolicyRuntime, build_runtime  # noqa: E402
from policies.vocabulary.accelerator_types import default_table  # noqa: E402
from webhook.cluster.model import ClusterStore  # noqa: E402
from webhook.cluster.yaml_source import YamlDirectorySource  # noqa: E402
from webhook.server.serving import settle_heap  # noqa: E402

REQUEST_FILE = _ROOT / "bench" / "data" / "typical-gpu-pod-request.json"
EXAMPLE_POLICIES = _ROOT / "examples" / "policies"
CONFORMANCE = _ROOT / "tests" / "policies" / "conformance"
BUDGET_MS = 1.0
# Eight GPU-policy style checks in the CEL both engines parse (cel-python has no optional syntax),
# to compare the CEL engines on equal terms.
CEL_COMPARISON = (
    "object.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged)"
    " || !c.securityContext.privileged)",
    "object.spec.containers.map(c, has(c.resources.limits) && 'nvidia.com/gpu' in c.resources.limits"
    " ? int(c.resources.limits['nvidia.com/gpu']) : 0).sum() <= 8",
    "object.spec.containers.all(c, !has(c.resources.limits) || !('nvidia.com/gpu' in c.resources.limits)"
    " || 'memory' in c.resources.limits)",
    "has(object.metadata.labels) && 'owner' in object.metadata.labels",
    "object.metadata.namespace != 'kube-system'",
    "request.userInfo.groups.exists(g, g == 'system:authenticated')",
    "quantity(object.spec.containers[0].resources.limits.memory).isLessThan(quantity('1Ti'))",
    "object.spec.containers.all(c, c.image.matches('^[a-z0-9.-]+(/[a-z0-9._-]+)+:[A-Za-z0-9._-]+$'))",
)


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


@contextlib.contextmanager
def _served_heap() -> Iterator[None]:
    """The heap as `kgwe serve` keeps it while serving (webhook/server/serving.py `settle_heap`: what was
    built before is frozen, young collections less often), undone afterwards."""
    threshold = gc.get_threshold()
    settle_heap()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


def _time(fn: Callable[[], Any], runs: int, warmup: int) -> dict[str, float]:
    for _ in range(warmup):
        fn()
    samples = []
    with _served_heap():
        for _ in range(runs):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
    return {
        "p50_ms": round(statistics.median(samples) * 1000, 4),
        "p99_ms": round(_percentile(samples, 0.99) * 1000, 4),
        "runs": runs,
    }


def _context() -> PolicyContext:
    store = ClusterStore(default_table())
    YamlDirectorySource(_ROOT / "examples" / "cluster", store).load()
    model = store.snapshot(force=True)
    request = json.loads(REQUEST_FILE.read_text())
    intent = {"acceleratorTypes": ["nvidia-h100-80gb", "nvidia-a100-80gb"], "profile": None,
              "gpuMemory": 40 * 1024**3, "sharing": None, "gpuFraction": None, "topology": None,
              "gang": "llm-7b", "gpus": 8, "inference": False}
    return PolicyContext(request=request, namespace_object=model.namespaces.get(request["namespace"]),
                         cluster=model.summary(), intent=intent, tenant="ml-research")


def _runtime(rego_engine: str = "embedded", opa_url: str | None = None, cel_engine: str = "cel-expr-python",
             rego_vm: str = "auto") -> PolicyRuntime:
    runtime = build_runtime(rego_engine=rego_engine, opa_url=opa_url, cel_engine=cel_engine,  # type: ignore[arg-type]
                            rego_vm=rego_vm)
    report = runtime.reload(builtin=True, directories=[str(EXAMPLE_POLICIES)])
    if not report.ok:
        raise RuntimeError(f"policies did not load: {report.errors}")
    return runtime


# Twenty GPUPolicies that all match the typical request, half Rego and half CEL, each with params, on top
# of the built-in set: the "all policies of a request within 1 ms at p99 with twenty policies".
_TWENTY_REGO = """package kgwe.bench.rego_{index}

import data.kgwe.lib.pod
import rego.v1

deny contains msg if {{
\tsome c in pod.gpu_containers
\tnot startswith(c.image, input.params.registry)
\tmsg := sprintf("container %q: image from %q only", [c.name, input.params.registry])
}}

warn contains msg if {{
\tcount(pod.gpu_containers) > input.params.maxContainers
\tmsg := "too many GPU containers"
}}
"""
_TWENTY_CEL = (
    "object.spec.containers.all(c, !has(c.securityContext) || !has(c.securityContext.privileged)"
    " || !c.securityContext.privileged)",
    "object.spec.containers.map(c, int(c.?resources.?limits['nvidia.com/gpu'].orValue('0'))).sum() <= params.max",
    "object.metadata.namespace != 'kube-system'",
    "request.userInfo.groups.exists(g, g != '')",
)


def twenty_policies() -> list[dict[str, Any]]:
    """Ten Rego and ten CEL GPUPolicies, all matching the bench request, none refusing it."""
    policies: list[dict[str, Any]] = []
    for index in range(10):
        policies.append({
            "apiVersion": "kgwe.io/v1alpha1", "kind": "GPUPolicy", "metadata": {"name": f"bench-rego-{index}"},
            "spec": {"enforcementAction": "Deny", "match": {"operations": ["CREATE"]},
                     "rego": {"module": _TWENTY_REGO.format(index=index)},
                     "params": {"registry": "", "maxContainers": 8}},
        })
        policies.append({
            "apiVersion": "kgwe.io/v1alpha1", "kind": "GPUPolicy", "metadata": {"name": f"bench-cel-{index}"},
            "spec": {"enforcementAction": "Deny", "match": {"operations": ["CREATE"]},
                     "matchConditions": [{"name": "gpu", "expression":
                                          "object.spec.containers.exists(c, 'nvidia.com/gpu' in "
                                          "c.?resources.?limits.orValue({}))"}],
                     "validations": [{"expression": e, "message": f"rule {n}"} for n, e in enumerate(_TWENTY_CEL)],
                     "params": {"max": 16 + index}},
        })
    return policies


def _twenty_runtime(rego_vm: str = "auto") -> PolicyRuntime:
    """The twenty-policy mix on the runtime's own path; `rego_vm="off"` keeps Rego on the interpreter."""
    runtime = build_runtime(rego_vm=rego_vm)
    report = runtime.reload(builtin=True, gpu_policies=twenty_policies())
    if not report.ok:
        raise RuntimeError(f"policies did not load: {report.errors}")
    return runtime


# Three admin Rego policies that run for every request (required label, allowed registries, GPU limits),
# as in issue 17's side-by-side with Gatekeeper ("the same three policies in every engine").
THREE_POLICIES = Path(__file__).resolve().parent / "data" / "three_policies"


def _three_admin_policies(ctx: PolicyContext, runs: int) -> dict[str, Any]:
    """The built-ins + three admin Rego policies: served (the built-ins in Python, the three on the engine)
    against the whole set on the engine (`native_builtins` off, as before the split), same requests."""
    served, whole = build_runtime(), build_runtime()
    whole.native_builtins = False
    for runtime in (served, whole):
        report = runtime.reload(builtin=True, directories=[str(THREE_POLICIES)])
        if not report.ok:
            raise RuntimeError(f"the three policies did not load: {report.errors}")
    if served.evaluate(ctx) != whole.evaluate(ctx):
        raise RuntimeError("the split and the whole Rego query disagree on the three-policy set")
    pods = iter(_new_pods(ctx, runs + 200))
    return {
        "rego_evaluator": rego_evaluator(served._set.prepared),
        # A replica: answered from the memo, keyed by what the policies read (policies/engines/rego_reads.py).
        "evaluate": _time(lambda: served.evaluate(ctx), runs, 200),
        # A new pod every time: the engine runs on the projected input.
        "evaluate_new_pod": _time(lambda: served.evaluate(next(pods)), runs, 200),
        "evaluate_whole_rego": _time(lambda: whole.evaluate(ctx), runs, 200),
    }


def _new_pods(ctx: PolicyContext, count: int) -> list[PolicyContext]:
    """`count` requests for pods of their own (a label each, so no answer is remembered for them)."""
    fresh = []
    for number in range(count):
        pod = copy.deepcopy(ctx.request["object"])
        pod["metadata"]["labels"] = {**pod["metadata"].get("labels", {}), "bench/pod": str(number)}
        fresh.append(dataclasses.replace(ctx, request={**ctx.request, "object": pod}))
    return fresh


def _rego_only(runtime: PolicyRuntime, ctx: PolicyContext) -> Callable[[], Any]:
    policy_set = runtime._set
    prepared = policy_set.prepared
    assert prepared is not None
    active = {p.name: True for p in policy_set.gpu_policies}

    def run() -> Any:
        prepared.set_cluster(ctx.cluster)
        return prepared.query(CHECK_QUERY, RegoInput({
            "request": ctx.request, "namespaceObject": ctx.namespace_object, "intent": ctx.intent,
            "tenant": ctx.tenant, "params": {}, "kgwe": {"active": active},
        }))

    return run


def _cel_only(runtime: PolicyRuntime, ctx: PolicyContext) -> Callable[[], Any]:
    """The CEL half of a check as the runtime runs it: match conditions, then validations, one scope."""
    from policies.runtime.cel_phase import CelScope

    policy_set = runtime._set

    def run() -> None:
        scope = CelScope(policy_set)
        failures: list[Any] = []
        for policy in runtime._active(policy_set, ctx, "check", failures, scope):
            runtime._validate(policy, ctx, scope)

    return run


def _cel_comparison(engine_name: str, ctx: PolicyContext) -> Callable[[], Any]:
    engine = build_cel_engine(engine_name)  # type: ignore[arg-type]
    programs = [engine.compile(expression) for expression in CEL_COMPARISON]
    request = ctx.request

    def run() -> None:
        activation = engine.activation({"object": request["object"], "request": request,
                                        "namespaceObject": ctx.namespace_object})
        for program in programs:
            if program.evaluate(activation) is not True:
                raise AssertionError(program.source)

    return run


def _conformance() -> dict[str, Any]:
    rego_cases = load_cases(CONFORMANCE / "rego_cases.yaml")
    cel_cases = load_cases(CONFORMANCE / "cel_cases.yaml")
    runners: dict[str, Any] = {"regorus (gordon-to-regorus 0.13)": supported_rego_runner("regorus")}
    if opa_go_available():
        runners["opa-go (OPA v1.20 in-process, reference)"] = supported_rego_runner("opa-go")
    runners["regorus as served (RVM where its gates hold, else the interpreter)"] = served_vm_runner()
    runners["regorus RVM, bare (no gates: measured, never served so)"] = regorus_rvm_runner()
    with contextlib.suppress(ImportError):
        runners["hobofan-regorus 0.2.5"] = hobofan_regorus_runner()
    result: dict[str, Any] = {"rego_cases": len(rego_cases), "cel_cases": len(cel_cases), "rego": {}, "cel": {}}
    for name, runner in runners.items():
        results = run_rego_cases(rego_cases, runner)
        result["rego"][name] = {"agree": sum(r.agrees for r in results),
                                "differ": [r.name for r in results if not r.agrees]}
    for engine in ("cel-expr-python", "cel-python"):
        results = run_cel_cases(cel_cases, engine)
        result["cel"][engine] = {"agree": sum(r.agrees for r in results),
                                 "differ": [r.name for r in results if not r.agrees]}
    return result


def bench_policies(runs: int = 3000, slow_runs: int = 300) -> dict[str, Any]:
    """p50/p99 per engine and in total for the default set + example policies on a typical GPU pod."""
    ctx = _context()
    raw = REQUEST_FILE.read_bytes()
    runtime = _runtime()
    results: dict[str, Any] = {
        "request_bytes": len(orjson.dumps(ctx.request)),
        "policies": runtime.policy_names(),
        "baseline_orjson_roundtrip": _time(lambda: orjson.dumps(orjson.loads(raw)), runs, 200),
    }
    results["total_check"] = _time(lambda: runtime.check(ctx), runs, 200)
    results["total_decide"] = _time(lambda: runtime.decide_placement(ctx), runs, 200)
    twenty = _twenty_runtime()
    interpreted = _twenty_runtime("off")
    for mix in (twenty, interpreted):
        if mix.evaluate(ctx)[1]:
            raise RuntimeError(f"the twenty-policy mix refused the bench request: {mix.evaluate(ctx)[1]}")
    if twenty.evaluate(ctx) != interpreted.evaluate(ctx):
        raise RuntimeError("the RVM and the interpreter disagree on the twenty-policy mix")
    new_pods, interpreted_pods = iter(_new_pods(ctx, runs + 200)), iter(_new_pods(ctx, runs + 200))
    results["twenty_policies"] = {
        "policies": len(twenty.policy_names()),
        "rego_evaluator": rego_evaluator(twenty._set.prepared),  # "rvm" unless a gate kept the interpreter
        # What /validate calls, for a pod of its own: every policy evaluated.
        "evaluate_new_pod": _time(lambda: twenty.evaluate(next(new_pods)), runs, 200),
        # For a replica: answered from the memo, keyed by what the policies read (policies/runtime/answer_memo.py).
        "evaluate": _time(lambda: twenty.evaluate(ctx), runs, 200),
        "decide": _time(lambda: twenty.decide_placement(ctx), runs, 200),  # what /mutate calls
        # New pods with `policies.regoVm: off`, in the same run.
        "evaluate_interpreter": _time(lambda: interpreted.evaluate(next(interpreted_pods)), runs, 200),
        "rego_check_rvm": _time(_rego_only(twenty, ctx), runs, 200),
        "rego_check_interpreter": _time(_rego_only(interpreted, ctx), runs, 200),
    }
    results["three_admin_policies"] = _three_admin_policies(ctx, runs)
    builtin_only = build_runtime()
    builtin_only.reload(builtin=True)
    # A replica: the built-ins' answer is remembered for pods alike but for identity (policies/runtime/answer_memo.py).
    results["builtin_only_evaluate"] = _time(lambda: builtin_only.evaluate(ctx), runs, 200)
    # A new pod every time: a label of its own, so the answer is computed (prepared before timing).
    pods = iter(_new_pods(ctx, runs + 200))
    results["builtin_only_evaluate_new_pod"] = _time(lambda: builtin_only.evaluate(next(pods)), runs, 200)
    results["total_check_plus_decide"] = _time(
        lambda: (runtime.check(ctx), runtime.decide_placement(ctx)), runs, 200
    )
    interpreter = _runtime(rego_vm="off")
    engines: dict[str, Any] = {
        f"rego:regorus ({rego_evaluator(runtime._set.prepared)}, the runtime's choice)":
            _time(_rego_only(runtime, ctx), runs, 200),
        "rego:regorus interpreter": _time(_rego_only(interpreter, ctx), runs, 200),
        "cel:cel-expr-python (example policies)": _time(_cel_only(runtime, ctx), runs, 200),
    }
    if opa_go_available():
        opa_go = _runtime("opa-go")
        engines["rego:opa-go"] = _time(_rego_only(opa_go, ctx), slow_runs, 50)
        results["total_check_opa_go"] = _time(lambda: opa_go.check(ctx), slow_runs, 50)
    for cel_engine, count in (("cel-expr-python", runs), ("cel-python", slow_runs)):
        engines[f"cel:{cel_engine} (8 comparison expressions)"] = _time(_cel_comparison(cel_engine, ctx), count, 20)
    try:
        from opa_rest_stub import OpaRestStub

        with OpaRestStub() as stub:
            remote = _runtime("opa", stub.url)
            engines["rego:opa-server-client (REST hop to a regorus stand-in)"] = _time(
                _rego_only(remote, ctx), slow_runs, 20
            )
    except ImportError:
        pass
    results["engines"] = engines
    baseline = results["baseline_orjson_roundtrip"]["p50_ms"]
    results["ratios_p50_vs_baseline"] = {
        name: round(value["p50_ms"] / baseline, 1)
        for name, value in {**{k: results[k] for k in ("total_check", "total_decide")}, **engines}.items()
    }
    worst = max(results["total_check"]["p99_ms"], results["total_decide"]["p99_ms"],
                results["twenty_policies"]["evaluate"]["p99_ms"])
    results["budget"] = {
        "p99_limit_ms": BUDGET_MS,
        "check_p99_ms": results["total_check"]["p99_ms"],
        "decide_p99_ms": results["total_decide"]["p99_ms"],
        "twenty_policies_evaluate_p99_ms": results["twenty_policies"]["evaluate"]["p99_ms"],
        "within": worst <= BUDGET_MS,
        "miss_ms": round(max(0.0, worst - BUDGET_MS), 4),
    }
    results["conformance"] = _conformance()
    return results


if __name__ == "__main__":
    print(json.dumps(bench_policies(), indent=2))
