"""The built-in policies in Python (policies/engines/native_builtins.py) answer exactly what regorus answers on the
shipped Rego modules, or decline; and the runtime uses them only when no other Rego policy can speak."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from manifests import example_pods
from review_strategies import EXAMPLES, TYPES, pods, text

from policies.api import PolicyContext
from policies.engines.aggregate import CHECK_QUERY, DECISION_QUERY, EVERYTHING_QUERY
from policies.engines.native_builtins import KNOWN_MODULES, NativeBuiltins, module_digest, native_units
from policies.engines.native_rules import Declined
from policies.engines.rego import RegoInput, RegorusEngine
from policies.loading.loader import collect_sources
from policies.loading.policy_set import CompiledUnit, prepare_rego
from policies.runtime.policy_runtime import PolicyRuntime
from rego import LIBRARY_DIR

ROOT = Path(__file__).resolve().parents[2]
GI = 1024**3


def _builtin_units() -> list[CompiledUnit]:
    sources = collect_sources(builtin_dir=LIBRARY_DIR, directories=[], gpu_policies=[])
    return [CompiledUnit(source, None) for source in sources]


@pytest.fixture(scope="module")
def engines() -> tuple[Any, NativeBuiltins]:
    units = _builtin_units()
    prepared, _ = prepare_rego(RegorusEngine(), units)
    native = NativeBuiltins.for_units(native_units(units))
    assert native is not None
    return prepared, native


def _example_cluster() -> dict[str, Any]:
    from webhook.cluster.model import ClusterStore
    from webhook.cluster.yaml_source import YamlDirectorySource
    from webhook.config import load_config

    store = ClusterStore(load_config(ROOT / "examples" / "config.yaml").accelerator_table())
    YamlDirectorySource(ROOT / "examples" / "cluster", store).load()
    return store.snapshot().summary()


EXAMPLE_CLUSTER = _example_cluster()
PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.5gb", "1g.24gb", "weird", "0g.0gb")


def _normalise(document: Any) -> Any:
    """Rego sets arrive as JSON arrays; the order of a set's members carries no meaning."""
    if isinstance(document, dict):
        return {k: _normalise(v) for k, v in document.items()}
    if isinstance(document, list) and all(isinstance(v, str) for v in document):
        return sorted(document)
    return document


def _compare(engines: tuple[Any, NativeBuiltins], document: dict[str, Any], cluster: dict[str, Any]) -> bool:
    """Both answers to every aggregate query; False when the native path declined."""
    prepared, native = engines
    prepared.set_cluster(cluster)
    try:
        answers = {q: native.query(q, document, cluster) for q in (EVERYTHING_QUERY, CHECK_QUERY, DECISION_QUERY)}
    except Declined:
        return False
    for query, answer in answers.items():
        expected = prepared.query(query, RegoInput({**document, "tenant": None, "params": {},
                                                    "kgwe": {"active": {}}}))
        assert _normalise(answer) == _normalise(expected), query
    return True


# -- generated inputs -------------------------------------------------------------------------------

gpu_memory = st.one_of(st.none(), st.sampled_from((0, 5 * GI, 10 * GI, 20 * GI, 20 * GI + 1, 40 * GI, 80 * GI)),
                       st.integers(-1, 200 * GI), st.just("10Gi"))
intents = st.fixed_dictionaries({}, optional={
    "gpus": st.integers(0, 9),
    "gpuMemory": gpu_memory,
    "acceleratorTypes": st.one_of(st.none(), st.lists(st.sampled_from(TYPES), max_size=3)),
    "profile": st.one_of(st.none(), st.just("premium-h100")),
    "sharing": st.one_of(st.none(), st.fixed_dictionaries({"mode": st.sampled_from(("mig", "mps"))})),
    "topology": st.one_of(st.none(), st.sampled_from(("nvlink", "none"))),
    "inference": st.booleans(),
})
namespaces = st.one_of(st.none(), st.fixed_dictionaries({"metadata": st.fixed_dictionaries({
    "name": st.just("team-a"),
    "labels": st.dictionaries(st.sampled_from(("kgwe.io/default-sharing", "team")),
                              st.sampled_from(("mig", "mps", "MIG", "")), max_size=2)})}))
mig_offers = st.dictionaries(st.sampled_from(PROFILES), st.fixed_dictionaries(
    {"devices": st.integers(0, 8)}, optional={"memoryGB": st.one_of(st.integers(0, 90), st.none())}), max_size=3)
clusters = st.one_of(st.just(EXAMPLE_CLUSTER), st.fixed_dictionaries({"types": st.dictionaries(
    st.sampled_from(TYPES), st.fixed_dictionaries({
        "maxGpusPerNode": st.integers(0, 8), "nvswitch": st.booleans(), "mig": mig_offers}), max_size=4)}))
hostile_containers = st.fixed_dictionaries({"name": st.one_of(st.sampled_from(("main", "side")), text)}, optional={
    "resources": st.fixed_dictionaries({}, optional={"limits": st.dictionaries(
        st.sampled_from(("nvidia.com/gpu", "amd.com/gpu", "nvidia.com/mig-1g.10gb", "memory", "cpu",
                         "deviceclass.resource.kubernetes.io/gpu.nvidia.com")),
        st.one_of(st.sampled_from(("1", "0", "2Gi")), st.integers(0, 2), st.booleans()), max_size=3),
        # GPUs through a claim of the pod's (DRA): a GPU container whatever the claim holds.
        "claims": st.lists(st.fixed_dictionaries({"name": st.sampled_from(("gpu", "nic"))}), max_size=2)}),
    "securityContext": st.fixed_dictionaries({}, optional={"privileged": st.one_of(st.booleans(), st.just("true"))}),
    "env": st.lists(st.fixed_dictionaries({"name": st.sampled_from(("NVIDIA_VISIBLE_DEVICES", "X"))}, optional={
        "value": st.one_of(st.sampled_from(("all", "0,1", "void", "none", "")), text),
        "valueFrom": st.one_of(st.none(), st.just({"configMapKeyRef": {"name": "devices", "key": "all"}}))}),
        max_size=2),
})


def _document(pod: dict[str, Any], intent: dict[str, Any], namespace: Any) -> dict[str, Any]:
    return {
        "request": {"uid": "u", "operation": "CREATE", "namespace": "team-a", "object": pod,
                    "userInfo": {"username": "alice", "groups": []}},
        "namespaceObject": namespace,
        "intent": intent,
    }


@settings(max_examples=EXAMPLES * 2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pod=pods(), intent=intents, namespace=namespaces, cluster=clusters)
def test_native_answers_equal_regorus_on_pods_users_write(
    engines: tuple[Any, NativeBuiltins], pod: dict[str, Any], intent: dict[str, Any], namespace: Any,
    cluster: dict[str, Any],
) -> None:
    _compare(engines, _document(pod, intent, namespace), cluster)


@settings(max_examples=EXAMPLES * 2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(containers=st.lists(hostile_containers, max_size=3), init=st.lists(hostile_containers, max_size=1),
       ephemeral=st.lists(hostile_containers, max_size=1),
       claims=st.lists(st.just({"name": "gpu", "resourceClaimTemplateName": "one-gpu"}), max_size=1),
       labels=st.dictionaries(st.just("kgwe.io/workload"), st.sampled_from(("inference", "training")), max_size=1),
       intent=intents, namespace=namespaces, cluster=clusters)
def test_native_answers_equal_regorus_on_odd_containers(
    engines: tuple[Any, NativeBuiltins], containers: list[dict[str, Any]], init: list[dict[str, Any]],
    ephemeral: list[dict[str, Any]], claims: list[dict[str, Any]],
    labels: dict[str, str], intent: dict[str, Any], namespace: Any, cluster: dict[str, Any],
) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": labels, "annotations": labels},
           "spec": {"containers": containers, "initContainers": init, "ephemeralContainers": ephemeral,
                    "resourceClaims": claims}}
    _compare(engines, _document(pod, intent, namespace), cluster)


def _example_pods() -> list[dict[str, Any]]:
    return example_pods(ROOT / "examples" / "pods")


@pytest.mark.parametrize("pod", _example_pods(), ids=lambda p: p["metadata"].get("name", "pod"))
def test_every_example_pod_is_answered_natively_and_alike(engines: tuple[Any, NativeBuiltins],
                                                          pod: dict[str, Any]) -> None:
    for intent, namespace in (
        ({"gpus": 1}, None),
        ({"gpus": 1, "inference": True, "gpuMemory": 10 * GI}, None),
        ({"gpus": 1}, {"metadata": {"labels": {"kgwe.io/default-sharing": "mig"}}}),
        ({"gpus": 4}, {"metadata": {"labels": {}}}),
    ):
        assert _compare(engines, _document(pod, intent, namespace), EXAMPLE_CLUSTER)


def test_the_mirrored_modules_are_the_shipped_ones() -> None:
    """A changed built-in module must come with its Python mirror (and a new digest here)."""
    shipped = {}
    for unit in _builtin_units():
        for info, source in zip(unit.source.infos, unit.source.modules.values(), strict=True):
            shipped[info.package] = module_digest(source)
    assert {p: shipped.get(p) for p in KNOWN_MODULES} == KNOWN_MODULES


# -- when the runtime may use them ------------------------------------------------------------------

def _runtime(tmp_path: Path, *, rego: dict[str, str] | None = None, gpu_policies: list[dict[str, Any]] | None = None,
             native: bool = True) -> PolicyRuntime:
    directory = tmp_path / "policies"
    directory.mkdir(exist_ok=True)
    for name, source in (rego or {}).items():
        (directory / name).write_text(source)
    runtime = PolicyRuntime(RegorusEngine(), native_builtins=native)
    report = runtime.reload(directories=[str(directory)], gpu_policies=gpu_policies or [])
    assert not report.errors
    return runtime


def _context(pod: dict[str, Any], namespace: str = "team-a") -> PolicyContext:
    return PolicyContext(
        request={"uid": "u", "operation": "CREATE", "namespace": namespace, "object": pod,
                 "userInfo": {"username": "alice", "groups": []}},
        namespace_object={"metadata": {"name": namespace, "labels": {}}},
        cluster=EXAMPLE_CLUSTER,
        intent={"gpus": 1},
        tenant=None,
    )


def _privileged_gpu_pod(namespace: str = "team-a") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": namespace},
            "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}},
                                     "securityContext": {"privileged": True}}]}}


def _answer(runtime: PolicyRuntime, ctx: PolicyContext) -> tuple[dict[str, Any], list[Any]]:
    decision, violations = runtime.evaluate(copy.deepcopy(ctx))
    return decision.fields, sorted((v.policy, v.action, v.message) for v in violations)


def test_the_runtime_answers_alike_with_and_without_the_native_path(tmp_path: Path) -> None:
    native, rego = _runtime(tmp_path, native=True), _runtime(tmp_path, native=False)
    for pod in [*_example_pods(), _privileged_gpu_pod()]:
        ctx = _context(copy.deepcopy(pod))
        assert _answer(native, ctx) == _answer(rego, ctx)
    assert ("kgwe.admission.privileged", "Deny") in {(v[0], v[1]) for v in _answer(native, _context(
        _privileged_gpu_pod()))[1]}


ADMIN_DENY = """package example.ban
import rego.v1
deny contains "banned" if input.request.object.metadata.name == "p"
"""
REPLACED_PRIVILEGED = """package kgwe.admission.privileged
import rego.v1
deny contains "replaced" if true
"""
ENCLOSING_LIBRARY = """package kgwe.lib
import rego.v1
helper := 1
"""


@pytest.mark.parametrize("modules", [{"ban.rego": ADMIN_DENY}, {"privileged.rego": REPLACED_PRIVILEGED},
                                     {"lib.rego": ENCLOSING_LIBRARY}], ids=["admin-policy", "replaced", "enclosing"])
def test_a_set_with_other_rego_that_always_runs_keeps_the_engine(tmp_path: Path, modules: dict[str, str]) -> None:
    runtime = _runtime(tmp_path, rego=modules)
    native = runtime._native_for(runtime._set)
    if "ban.rego" in modules:  # an admin policy runs on the engine for every request; the built-ins need not
        assert native is not None and not native.answers([])
    else:  # a replaced built-in, or a package enclosing one: the engine answers everything
        assert native is None
    messages = {v.message for v in runtime.evaluate(_context(_privileged_gpu_pod()))[1]}
    if "ban.rego" in modules:
        assert "banned" in messages
    if "privileged.rego" in modules:
        assert "replaced" in messages


TEAM_B = """package team.b
import rego.v1
deny contains "no privileged pods in team-b" if true
"""


def test_an_active_gpupolicy_with_rego_is_evaluated_by_the_engine(tmp_path: Path) -> None:
    policy = {
        "apiVersion": "kgwe.io/v1alpha1", "kind": "GPUPolicy", "metadata": {"name": "team-b-only"},
        "spec": {"enforcementAction": "Deny", "match": {"namespaces": ["team-b"]},
                 "rego": {"module": TEAM_B}},
    }
    runtime = _runtime(tmp_path, gpu_policies=[policy])
    native = runtime._native_for(runtime._set)
    assert native is not None and native.answers([]) and not native.answers(["team-b-only"])
    outside = {v.message for v in runtime.evaluate(_context(_privileged_gpu_pod("team-a")))[1]}
    inside = {v.message for v in runtime.evaluate(_context(_privileged_gpu_pod("team-b"), "team-b"))[1]}
    assert "no privileged pods in team-b" not in outside
    assert "no privileged pods in team-b" in inside
    assert any("privileged" in m and "team-b" not in m for m in inside)
