"""regorus' compiled VM (RVM) against regorus' interpreter: same documents for the three aggregate queries,
same failures, and the gates that keep a set or a request on the interpreter where the RVM would differ.

The differential tests prepare one policy set twice (`RegorusEngine`, the interpreter; `RegorusVmEngine`,
the RVM with its gates) and ask both the same queries over generated pods, intents and namespaces, pods
the API server would never send included. Documents must be byte-identical as sorted JSON.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bench_policies import twenty_policies
from effort import long_run, tries
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policy_fixtures import comparing_runtime, gpu_pod

from policies.api import PolicyContext
from policies.engines.aggregate import CHECK_QUERY, DECISION_QUERY, EVERYTHING_QUERY
from policies.engines.rego import UNDEFINED, RegoEvaluationError, RegoInput, RegorusEngine
from policies.engines.rego_rvm import rego_evaluator, rego_vm_mode
from policies.engines.rego_rvm_gates import _PROBE_CLUSTER, request_guard, same_document
from policies.loading.policy_set import _modules, _params
from policies.runtime.outcomes import PolicyEngineError
from policies.runtime.policy_runtime import PolicyRuntime

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "policies"
QUERIES = (CHECK_QUERY, DECISION_QUERY, EVERYTHING_QUERY)


def _runtime(rego_vm: str, *, directories: tuple[str, ...] = (), gpu_policies: list[dict[str, Any]] | None = None,
             failure_mode: str = "open") -> PolicyRuntime:
    runtime = comparing_runtime(rego_vm=rego_vm, failure_mode=failure_mode)  # type: ignore[arg-type]
    report = runtime.reload(builtin=True, directories=list(directories), gpu_policies=gpu_policies or [])
    assert report.ok, report.errors
    return runtime


def _pair(runtime: PolicyRuntime) -> tuple[Any, Any, list[str]]:
    """The runtime's prepared set (RVM) and the same modules on the interpreter."""
    policy_set = runtime._set
    modules = {**_modules(policy_set.units)}
    from policies.engines.aggregate import AGGREGATE_MODULE, aggregate_module

    modules[AGGREGATE_MODULE] = aggregate_module(policy_set.gathered)
    interpreter = RegorusEngine().prepare(modules, {"kgwe": {"params": _params(policy_set.units), "cluster": {}}})
    return policy_set.prepared, interpreter, [g.name for g in policy_set.gathered if g.gated]


def _answer(prepared: Any, query: str, document: dict[str, Any], cluster: dict[str, Any]) -> Any:
    prepared.set_cluster(cluster)
    try:
        value = prepared.query(query, RegoInput(copy.deepcopy(document)))
    except RegoEvaluationError as exc:
        return ("error", str(exc))
    return "undefined" if value is UNDEFINED else value


# -- generated requests ---------------------------------------------------------------------------

_text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=8)
_hostile = st.one_of(st.none(), st.integers(-3, 3), st.booleans(), st.lists(st.integers(), max_size=2), _text)
_quantity = st.one_of(st.sampled_from(["0", "1", "2", "8", "16", "1k", "500m", "10Gi", "1.5", "abc", ""]), _hostile)
_limits = st.dictionaries(
    st.sampled_from(["nvidia.com/gpu", "amd.com/gpu", "nvidia.com/mig-1g.10gb", "memory", "cpu"]), _quantity,
    max_size=3)
_container = st.fixed_dictionaries(
    {"name": st.one_of(st.sampled_from(["main", "side", 'q"uote', "ü"]), _hostile)},
    optional={
        "image": st.one_of(st.sampled_from(["registry.example/cuda:12", "cuda", "nginx"]), _hostile),
        "resources": st.one_of(st.fixed_dictionaries({}, optional={"limits": _limits, "requests": _limits}),
                               _hostile),
        "securityContext": st.one_of(st.fixed_dictionaries({}, optional={"privileged": st.one_of(
            st.booleans(), _hostile)}), _hostile),
        "env": st.one_of(st.lists(st.fixed_dictionaries(
            {"name": st.one_of(st.sampled_from(["NVIDIA_VISIBLE_DEVICES", "PATH"]), _hostile)},
            optional={"value": st.one_of(st.sampled_from(["all", "none", "void", "", "0"]), _hostile)}),
            max_size=2), _hostile),
    },
)
_labels = st.one_of(st.dictionaries(
    st.sampled_from(["kgwe.io/workload", "owner", "kgwe.io/default-sharing", "app"]),
    st.one_of(st.sampled_from(["inference", "mig", "alice", ""]), _hostile), max_size=3), _hostile)
_pod = st.fixed_dictionaries({
    "apiVersion": st.just("v1"), "kind": st.just("Pod"),
    "metadata": st.fixed_dictionaries({"name": st.just("p"), "namespace": st.just("team-a")},
                                      optional={"labels": _labels, "annotations": _labels}),
    "spec": st.fixed_dictionaries({}, optional={
        "containers": st.one_of(st.lists(_container, max_size=3), _hostile),
        "initContainers": st.lists(_container, max_size=1),
    }),
})
_intent = st.fixed_dictionaries({
    "acceleratorTypes": st.one_of(st.none(), st.lists(st.sampled_from(
        ["nvidia-a100-80gb", "nvidia-l4", "nvidia-h100-80gb", "unknown"]), max_size=2)),
    "profile": st.one_of(st.none(), st.just("1g.10gb")),
    "gpuMemory": st.one_of(st.none(), st.sampled_from([0, 10 * 1024**3, 10 * 1024**3 + 1, 20 * 1024**3, 80 * 1024**3])),
    "sharing": st.one_of(st.none(), st.just("mig"), st.just("mps")),
    "gpuFraction": st.none(),
    "topology": st.one_of(st.none(), st.sampled_from(["nvlink", "none"])),
    "gang": st.none(),
    "gpus": st.one_of(st.none(), st.integers(0, 9)),
    "inference": st.one_of(st.none(), st.booleans()),
})
# Intents the webhook never writes, for the hostile differential only.
_hostile_intent = st.one_of(_intent, _intent.flatmap(lambda intent: st.fixed_dictionaries({
    **{k: st.just(v) for k, v in intent.items()},
    "acceleratorTypes": st.one_of(st.just(intent["acceleratorTypes"]), _hostile),
    "gpus": st.one_of(st.just(intent["gpus"]), _hostile),
    "gpuMemory": st.one_of(st.just(intent["gpuMemory"]), _hostile),
})))
_namespace = st.one_of(st.none(), st.fixed_dictionaries({"metadata": st.fixed_dictionaries(
    {"name": st.just("team-a")}, optional={"labels": _labels})}))
_cluster = st.sampled_from([{}, _PROBE_CLUSTER, {"types": {"nvidia-a100-80gb": {
    "nvswitch": True, "maxGpusPerNode": 8, "mig": {"1g.10gb": {"devices": 7, "memoryGB": 10},
                                                    "7g.80gb": {"devices": 1, "memoryGB": 80}}}}}])


def _document(pod: dict[str, Any], namespace: Any, intent: dict[str, Any], active: list[str]) -> dict[str, Any]:
    return {
        "request": {"uid": "u", "operation": "CREATE", "namespace": "team-a", "object": pod,
                    "userInfo": {"username": "alice", "groups": ["system:authenticated"]}},
        "namespaceObject": namespace, "intent": intent, "tenant": "team-a", "params": {},
        "kgwe": {"active": dict.fromkeys(active, True)},
    }


SETS = {
    "builtins": lambda: _runtime("auto"),
    "examples": lambda: _runtime("auto", directories=(str(EXAMPLES),)),
    "twenty": lambda: _runtime("auto", gpu_policies=twenty_policies()),
}
_PAIRS: dict[str, tuple[Any, Any, list[str]]] = {}


def _prepared_pair(name: str) -> tuple[Any, Any, list[str]]:
    if name not in _PAIRS:
        _PAIRS[name] = _pair(SETS[name]())
    return _PAIRS[name]


@pytest.mark.parametrize("name", sorted(SETS))
def test_the_shipped_sets_are_served_by_the_rvm(name: str) -> None:
    rvm, _, _ = _prepared_pair(name)
    assert rego_evaluator(rvm) == "rvm"


@pytest.mark.parametrize("name", sorted(SETS))
@settings(max_examples=tries(20, 120), deadline=None, suppress_health_check=list(HealthCheck))
@given(pod=_pod, namespace=_namespace, intent=_hostile_intent, cluster=_cluster, all_active=st.booleans(),
       data=st.data())
def test_rvm_answers_as_the_interpreter(name: str, pod: dict[str, Any], namespace: Any, intent: dict[str, Any],
                                        cluster: dict[str, Any], all_active: bool, data: Any) -> None:
    rvm, interpreter, gated = _prepared_pair(name)
    active = gated if all_active else data.draw(st.lists(st.sampled_from(gated or ["none"]), unique=True))
    document = _document(pod, namespace, intent, active)
    for query in QUERIES:
        expected = _answer(interpreter, query, document, cluster)
        got = _answer(rvm, query, document, cluster)
        assert same_document(got, expected), (query, got, expected)


# Pods as the API server sends them: typed fields, every container named.
_plain_limits = st.dictionaries(st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "memory", "cpu"]),
                                st.sampled_from(["0", "1", "2", "8", "1k", "500m", "10Gi"]), max_size=3)
_plain_container = st.fixed_dictionaries(
    {"name": st.sampled_from(["main", "side", 'q"uote', "ü"]), "image": st.sampled_from(["cuda", "nginx"])},
    optional={
        "resources": st.fixed_dictionaries({}, optional={"limits": _plain_limits, "requests": _plain_limits}),
        "securityContext": st.fixed_dictionaries({}, optional={"privileged": st.booleans()}),
        "env": st.lists(st.fixed_dictionaries({"name": st.sampled_from(["NVIDIA_VISIBLE_DEVICES", "PATH"])},
                                              optional={"value": st.sampled_from(["all", "none", "void", ""])}),
                        max_size=2),
    },
)
_plain_labels = st.dictionaries(st.sampled_from(["kgwe.io/workload", "owner", "kgwe.io/default-sharing"]),
                                st.sampled_from(["inference", "mig", "alice", ""]), max_size=3)
_plain_pod = st.fixed_dictionaries({
    "metadata": st.fixed_dictionaries({"name": st.just("p")}, optional={"labels": _plain_labels,
                                                                        "annotations": _plain_labels}),
    "spec": st.fixed_dictionaries({"containers": st.lists(_plain_container, min_size=1, max_size=3)}),
})
_plain_namespace = st.one_of(st.none(), st.fixed_dictionaries({"metadata": st.fixed_dictionaries(
    {"name": st.just("team-a")}, optional={"labels": _plain_labels})}))


@pytest.mark.parametrize("name", sorted(SETS))
@settings(max_examples=tries(12, 80), deadline=None, suppress_health_check=list(HealthCheck))
@given(pod=_plain_pod, namespace=_plain_namespace, intent=_intent, cluster=_cluster, all_active=st.booleans())
def test_the_rvm_itself_answers_plain_requests_as_the_interpreter(
    name: str, pod: dict[str, Any], namespace: Any, intent: dict[str, Any], cluster: dict[str, Any], all_active: bool,
) -> None:
    rvm, interpreter, gated = _prepared_pair(name)
    document = _document(pod, namespace, intent, gated if all_active else [])
    before = rvm.fallbacks
    for query in QUERIES:
        expected = _answer(interpreter, query, document, cluster)
        assert same_document(_answer(rvm, query, document, cluster), expected), query
    assert rvm.fallbacks == before  # answered by the RVM, not handed to the interpreter


def test_plain_requests_are_answered_by_the_rvm_itself() -> None:
    rvm, interpreter, gated = _prepared_pair("twenty")
    pod = {"metadata": {"name": "p", "labels": {}}, "spec": {"containers": [
        {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "2"}},
         "securityContext": {"privileged": True}}]}}
    document = _document(pod, None, {"gpus": 2}, gated)
    before = rvm.fallbacks
    for query in QUERIES:
        assert same_document(_answer(rvm, query, document, _PROBE_CLUSTER),
                             _answer(interpreter, query, document, _PROBE_CLUSTER))
    assert rvm.fallbacks == before
    check = _answer(rvm, CHECK_QUERY, document, _PROBE_CLUSTER)
    assert check["deny"]["kgwe.admission.privileged"] == [
        'container "main" uses GPUs and is privileged; privileged containers see every GPU on the node']


def test_hostile_shapes_go_to_the_interpreter() -> None:
    rvm, _, gated = _prepared_pair("builtins")
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": 5, "image": "cuda"}]}}
    assert request_guard(_document(pod, None, {}, gated)) is not None
    before = rvm.fallbacks
    _answer(rvm, CHECK_QUERY, _document(pod, None, {}, gated), {})
    assert rvm.fallbacks == before + 1


def test_an_undefined_value_leaking_into_a_message_goes_to_the_interpreter() -> None:
    # `c.name` missing: the RVM would add "<undefined>" to the set; the interpreter adds nothing.
    rvm, interpreter, gated = _prepared_pair("builtins")
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [
        {"image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1"}}, "securityContext": {"privileged": True}}]}}
    document = _document(pod, None, {}, gated)
    before = rvm.fallbacks
    got = _answer(rvm, CHECK_QUERY, document, {})
    assert rvm.fallbacks == before + 1
    assert same_document(got, _answer(interpreter, CHECK_QUERY, document, {}))


def _gpu_policy(name: str, module: str) -> dict[str, Any]:
    return {"apiVersion": "kgwe.io/v1alpha1", "kind": "GPUPolicy", "metadata": {"name": name},
            "spec": {"enforcementAction": "Deny", "rego": {"module": module}}}


ERRING = """package kgwe.policy.erring
import rego.v1
deny contains msg if {
\tn := to_number(object.get(input.request.object.metadata.annotations, "cost", "0"))
\tn > 10
\tmsg := "too expensive"
}
"""


def test_a_set_whose_builtins_may_fail_stays_on_the_interpreter() -> None:
    runtime = _runtime("auto", gpu_policies=[_gpu_policy("erring", ERRING)])
    assert rego_evaluator(runtime._set.prepared) == "interpreter"


@pytest.mark.parametrize("failure_mode", ["open", "closed"])
def test_a_failing_policy_fails_the_same_way_on_both(failure_mode: str) -> None:
    from policies.api import PolicyContext

    on = _runtime("auto", gpu_policies=[_gpu_policy("erring", ERRING)], failure_mode=failure_mode)
    off = _runtime("off", gpu_policies=[_gpu_policy("erring", ERRING)], failure_mode=failure_mode)
    pod = {"metadata": {"name": "p", "namespace": "a", "annotations": {"cost": "lots"}},
           "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    ctx = PolicyContext(request={"uid": "u", "operation": "CREATE", "namespace": "a", "object": pod,
                                 "userInfo": {"username": "u"}},
                        namespace_object=None, cluster={}, intent={"gpus": 1}, tenant=None)
    assert rego_evaluator(on._set.prepared) == "interpreter"
    answers: list[Any] = []
    for runtime in (on, off):
        try:
            answers.append(runtime.evaluate(ctx)[1])
        except PolicyEngineError as exc:  # closed: /validate refuses the pod with this message
            answers.append(str(exc))
    assert answers[0] == answers[1]
    # The failing policy alone says what failureMode makes it say; the others (the built-ins) still answer.
    assert [v.policy for v in answers[0] if v.policy != "erring"] == ["kgwe.admission.memory_limit"]
    failing = [v for v in answers[0] if v.policy == "erring"]
    assert [v.action for v in failing] == ["Deny" if failure_mode == "closed" else "Warn"]
    assert failing[0].failed and "could not parse string as number" in failing[0].message


def test_every_in_a_module_keeps_the_set_on_the_interpreter() -> None:
    module = """package kgwe.policy.all_named
import rego.v1
deny contains "unnamed container" if {
\tnot every_named
}
every_named if {
\tevery c in input.request.object.spec.containers { is_string(c.name) }
}
"""
    runtime = _runtime("auto", gpu_policies=[_gpu_policy("all-named", module)])
    assert rego_evaluator(runtime._set.prepared) == "interpreter"


def test_off_serves_every_set_on_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    assert rego_evaluator(_runtime("off")._set.prepared) == "interpreter"
    monkeypatch.setenv("KGWE_REGO_VM", "off")
    assert rego_vm_mode() == "off"
    assert rego_evaluator(_runtime(None)._set.prepared) == "interpreter"  # type: ignore[arg-type]
    monkeypatch.delenv("KGWE_REGO_VM")
    assert rego_vm_mode() == "auto"


def test_data_updates_reach_the_rvm() -> None:
    rvm, interpreter, gated = _prepared_pair("builtins")
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "m", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}
    document = _document(pod, None, {"gpus": 2}, gated)
    only_nvswitch = {"types": {"nvidia-a100-80gb": {"nvswitch": True, "maxGpusPerNode": 8, "mig": {}}}}
    assert _answer(rvm, DECISION_QUERY, document, only_nvswitch) == {"kgwe.placement.nvlink": {"topology": "nvlink"}}
    assert _answer(rvm, DECISION_QUERY, document, _PROBE_CLUSTER) == {}  # the L4 has no NVSwitch
    assert _answer(interpreter, DECISION_QUERY, document, _PROBE_CLUSTER) == {}


def test_the_rvm_serves_threads_other_than_the_loading_one() -> None:
    """regorus' VMs are unsendable: each thread builds its own from the compiled program's bytes."""
    from concurrent.futures import ThreadPoolExecutor

    rvm, interpreter, gated = _prepared_pair("twenty")
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [
        {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}
    document = _document(pod, None, {"gpus": 2}, gated)
    expected = _answer(interpreter, EVERYTHING_QUERY, document, _PROBE_CLUSTER)
    with ThreadPoolExecutor(max_workers=3) as pool:
        answers = list(pool.map(lambda _: _answer(rvm, EVERYTHING_QUERY, document, _PROBE_CLUSTER), range(12)))
    assert all(same_document(answer, expected) for answer in answers)


@pytest.mark.parametrize("body", [
    "count(input.request.object.spec.containers) * 2 > 4",  # arithmetic: fails on non-numbers
    "to_number(object.get(input.request.object.metadata.labels, \"n\", \"0\")) > 4",
    "regex.match(object.get(input.request.object.metadata.labels, \"re\", \"a\"), \"a\")",
    # sprintf fails on a verb without an argument, an argument without a verb, `%d` of a fraction.
    "sprintf(\"%s and %s\", [input.request.object.metadata.name]) != \"\"",
    "sprintf(\"%d GPUs\", [input.intent.gpus]) != \"\"",
    "sprintf(input.request.object.metadata.name, []) != \"\"",
])
def test_constructs_that_fail_on_valid_values_keep_the_set_on_the_interpreter(body: str, tmp_path: Path) -> None:
    # In a package under the shipped library's: being below `kgwe.lib.pod` does not make it shipped.
    (tmp_path / "extra.rego").write_text(
        # Reached only for pods labelled rare=yes: no load-time probe runs into the failure.
        f"package kgwe.lib.pod.extra\nimport rego.v1\nwarn contains \"x\" if {{\n"
        f"\tinput.request.object.metadata.labels.rare == \"yes\"\n\t{body}\n}}\n")
    runtime = _runtime("auto", directories=(str(tmp_path),))
    assert rego_evaluator(runtime._set.prepared) == "interpreter"


def test_type_only_builtins_in_an_admin_module_are_served_by_the_rvm(tmp_path: Path) -> None:
    (tmp_path / "names.rego").write_text(
        "package kgwe.admin.names\nimport rego.v1\nwarn contains msg if {\n"
        "\tsome c in input.request.object.spec.containers\n\tnot startswith(c.name, \"app-\")\n"
        "\tmsg := sprintf(\"container %q: names start with app-\", [c.name])\n}\n")
    runtime = _runtime("auto", directories=(str(tmp_path),))
    assert rego_evaluator(runtime._set.prepared) == "rvm"


def _example_pods() -> list[dict[str, Any]]:
    import yaml

    found = []
    for path in sorted((ROOT / "examples" / "pods").glob("*.yaml")):
        found.extend(d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict) and d.get("kind") == "Pod")
    return found


def _example_cluster() -> dict[str, Any]:
    from webhook.cluster.model import ClusterStore
    from webhook.cluster.yaml_source import YamlDirectorySource
    from webhook.config import load_config

    store = ClusterStore(load_config(ROOT / "examples" / "config.yaml").accelerator_table())
    YamlDirectorySource(ROOT / "examples" / "cluster", store).load()
    return store.snapshot().summary()


@pytest.mark.parametrize("name", ["examples", "twenty"])
def test_every_example_pod_gets_the_same_answers_through_the_runtime(name: str) -> None:
    """`evaluate`, `check` and `decide_placement` of the runtime on the RVM and with `regoVm: off`: same
    decisions, same violations, for every example pod in a plain and a MIG namespace, on the example
    cluster and on one with MIG profile names the library cannot read (the interpreter then answers)."""
    from policies.api import PolicyContext

    gpu_policies = twenty_policies() if name == "twenty" else None
    directories = (str(EXAMPLES),) if name == "examples" else ()
    on = _runtime("auto", directories=directories, gpu_policies=gpu_policies)
    off = _runtime("off", directories=directories, gpu_policies=gpu_policies)
    assert rego_evaluator(on._set.prepared) == "rvm"
    on.native_builtins = off.native_builtins = False  # every request through Rego, not the Python mirror
    weird = copy.deepcopy(_PROBE_CLUSTER)
    weird["types"]["nvidia-a100-80gb"]["mig"]["weird"] = {"devices": 1, "memoryGB": 5}
    pods = _example_pods()
    # Every pod in every pairing with --long; in the default run each pairing takes every third pod, from a
    # different start, so the four pairings still see every pod.
    stride = 1 if long_run() else 3
    pairings = [(cluster, namespace) for cluster in (_example_cluster(), weird)
                for namespace in (None, {"metadata": {"name": "ml", "labels": {"kgwe.io/default-sharing": "mig"}}})]
    for n, (cluster, namespace) in enumerate(pairings):
        for pod in pods[n % stride::stride]:
            request = {"uid": "u", "operation": "CREATE", "namespace": "ml", "object": pod,
                       "userInfo": {"username": "alice", "groups": ["system:authenticated"]}}
            ctx = PolicyContext(request=request, namespace_object=namespace, cluster=cluster,
                                intent={"gpus": 2, "gpuMemory": 10 * 1024**3}, tenant="ml")
            assert on.evaluate(ctx) == off.evaluate(ctx), pod["metadata"]["name"]
            assert on.check(ctx) == off.check(ctx)
            assert on.decide_placement(ctx) == off.decide_placement(ctx)


def test_a_set_the_rvm_compiler_panics_on_is_served_by_the_interpreter(
    tmp_path: Path, make_context: Any
) -> None:
    # regorus 0.13's RVM compiler panics (index out of bounds) on an iteration in a set rule's head; a
    # panic is pyo3's PanicException, a BaseException: the set must load on the interpreter, not fail the
    # reload (found by tests/policies/test_rego_projection_differential.py).
    (tmp_path / "images.rego").write_text(
        "package kgwe.admin.images\nimport rego.v1\n\n"
        "deny contains input.request.object.spec.containers[_].image if input.request.operation == \"CREATE\"\n")
    runtime = _runtime("auto", directories=(str(tmp_path),))
    assert rego_evaluator(runtime._set.prepared) == "interpreter"
    _, violations = runtime.evaluate(make_context(gpu_pod()))
    assert [(v.policy, v.action, v.message) for v in violations] == [("kgwe.admin.images", "Deny", "cuda")]


def test_a_set_prepared_again_is_served_as_the_first_time(tmp_path: Path, make_context: Any) -> None:
    """A reload prepares an unchanged set from what the first preparation concluded (rego_rvm.py
    `_VerifiedSets`): the same evaluator, the same answers; a set refused the first time is refused again."""
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "labels.rego").write_text(
        "package admin.labels\nimport rego.v1\n"
        'deny contains "stop" if input.request.object.metadata.labels.stop == "1"\n')
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "images.rego").write_text(
        "package kgwe.admin.images\nimport rego.v1\n\n"
        "deny contains input.request.object.spec.containers[_].image if input.request.operation == \"CREATE\"\n")
    stopped = gpu_pod()
    stopped["metadata"]["labels"] = {"stop": "1"}
    for directory, evaluator in ((tmp_path / "one", "rvm"), (tmp_path / "other", "interpreter")):
        first, again = (_runtime("auto", directories=(str(directory),)) for _ in range(2))
        assert rego_evaluator(first._set.prepared) == rego_evaluator(again._set.prepared) == evaluator
        for pod in (gpu_pod(), stopped):
            assert again.evaluate(make_context(pod)) == first.evaluate(make_context(pod))
            assert again.check(make_context(pod)) == first.check(make_context(pod))


def test_a_part_the_engine_was_not_handed_keeps_the_request_on_the_rvm(
    make_context: Callable[..., PolicyContext], tmp_path: Path
) -> None:
    """A policy set that reads only labels is handed no pod spec (policies/engines/rego_reads.py): the
    guard takes the absent parts for what they are, and the RVM answers as the interpreter does."""
    (tmp_path / "labels.rego").write_text(
        "package admin.labels\nimport rego.v1\n"
        'deny contains "stop" if input.request.object.metadata.labels.stop == "1"\n')
    answers = []
    for vm in ("auto", "off"):
        runtime = comparing_runtime(rego_vm=vm)  # type: ignore[arg-type]
        assert runtime.reload(builtin=True, directories=[str(tmp_path)]).ok
        answers.append([runtime.evaluate(make_context(gpu_pod(labels=labels)))[1] for labels in ({"stop": "1"}, {})])
        if vm == "auto":
            assert getattr(runtime._set.prepared, "fallbacks", None) == 0
    assert answers[0] == answers[1] and answers[0][0] and not answers[0][1]
