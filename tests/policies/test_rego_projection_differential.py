"""Differential check of the Rego input projection (policies/engines/rego_reads.py).

The claim under test: for every module the engine runs, its answer on `projection.apply(input)` is its
answer on the whole input. A wrong claim is a security bug (a Deny policy reading a removed key would
admit the pod), so the check runs regorus itself, as KGWE serves it, on both inputs and compares:

- the interpreter (`regorus.Engine`): the aggregate KGWE queries (`data.kgwe.aggregate`, with the
  policies answered natively skipped through `input.kgwe.native`) and each running policy's whole
  package, as documents (orjson, sorted keys) or as failures (both fail, or neither does);
- the compiled VM (`regorus.Program` / `Rvm`), on the set as policies/engines/rego_rvm.py compiles it
  (its aggregate, entry `everything`), where it compiles.

Sets come from tests/policies/rego_generator.py (seeded: the same sets every run), and from the
hand-written cases below, one per corner of the language the analysis must see through; MEMBER_CASES
are the reads into collection members (projection step EACH), each with the paths a sound narrowing keeps
(a member kept whole where it must be), on inputs whose members differ where a cut would show. The reads are
built as `policies.loading.policy_set.input_reads` builds them: a unit per package, libraries being the
units with no deny/warn/decision rules.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
import regorus
from effort import tries
from policy_fixtures import comparing_runtime
from rego_generator import GeneratedSet, RegoGenerator

from policies.api import PolicyContext
from policies.engines.aggregate import AGGREGATE_MODULE, EVERYTHING_QUERY, GatheredPolicy, aggregate_module
from policies.engines.projection import EACH, Each, Projection
from policies.engines.rego_cycles import rule_cycle
from policies.engines.rego_reads import InputReads
from policies.engines.rego_rvm import EVERYTHING_ENTRY, rvm_aggregate_modules
from policies.engines.rego_source import inspect_module
from policies.runtime.policy_runtime import PolicyRuntime

SETS = tries(50, 600)
# What the generator's member flows must reach (tests/policies/rego_generator.py names them).
MEMBER_FEATURES = frozenset({
    # iterating an input collection or a collection rule
    "member-some", "member-some-k-v", "member-every", "member-comprehension", "member-nested",
    "member-object-values", "member-head", "member-value",
    # computed steps: `X[i].f`, `X[_].f`, `X[0].f`; the count alone
    "member-index", "member-wildcard", "member-constant-index", "member-count",
    # collection rules: of this module, of a library through its import or `data.`
    "collection-rule", "collection-object-get", "collection-concat", "collection-filter", "collection-import",
    "collection-data-ref",
    # functions of a member, of this module and of a library
    "member-function-multi", "member-function-else", "member-function-part", "member-function-calls",
    "member-function-whole", "member-function-input", "member-function-iter", "member-library-function",
    # members that must stay whole, or names that are not what they seem
    "member-set-count", "member-set-field", "member-set-rule", "member-whole-builtin", "member-unify",
    "member-destructure", "member-rebind", "member-shadow", "member-with",
})
INPUTS_PER_SET = 4
DATA = {"kgwe": {"params": {"gpu-limit": {"limit": 2}}, "cluster": {"nodes": 3}}}

Outcome = tuple[str, Any]  # ("value", sorted JSON bytes) or ("failed", "")


def _gathered(policy_set: GeneratedSet) -> list[GatheredPolicy]:
    return [GatheredPolicy(unit, policy_set.packages[unit], policy_set.rules[unit], gated=False)
            for unit in policy_set.packages]


def _interpreter(policy_set: GeneratedSet) -> Any | None:
    """The set with KGWE's aggregate on regorus' interpreter, or None when it does not parse."""
    engine = regorus.Engine()
    try:
        for name, source in policy_set.modules().items():
            engine.add_policy(name, source)
        engine.add_policy(AGGREGATE_MODULE, aggregate_module(_gathered(policy_set)))
    except Exception:
        return None
    engine.add_data_json(orjson.dumps(DATA).decode())
    return engine


def _rvm(policy_set: GeneratedSet) -> Any | None:
    """The set as policies/engines/rego_rvm.py compiles it for the RVM, or None where it does not compile."""
    modules = {**policy_set.modules(), **rvm_aggregate_modules(_gathered(policy_set))}
    if rule_cycle(modules) != []:
        return None  # recursion crashes the RVM: KGWE keeps such a set on the interpreter (rego_cycles.py)
    try:
        program = regorus.Program.compile_from_modules(orjson.dumps(DATA).decode(), list(modules.items()),
                                                       [EVERYTHING_ENTRY])
        vm = regorus.Rvm()
        vm.load_program(program)
        vm.set_data_json(orjson.dumps(DATA).decode())
    except BaseException as exc:  # regorus 0.13's RVM compiler panics on some sets (PanicException)
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        return None
    return vm


def _document(value: Any) -> Outcome:
    return ("value", orjson.dumps(value, option=orjson.OPT_SORT_KEYS))


def _ask(engine: Any, query: str, document: Mapping[str, Any]) -> Outcome:
    try:
        engine.set_input_json(orjson.dumps(document).decode())
        rows = orjson.loads(engine.eval_query_as_json(query)).get("result") or []
    except Exception:
        return ("failed", "")
    return _document(rows[0]["expressions"][0]["value"] if rows else "<undefined>")


def _ask_rvm(vm: Any, document: Mapping[str, Any]) -> Outcome:
    try:
        vm.set_input_json(orjson.dumps(document).decode())
        return _document(orjson.loads(vm.execute_entry_point(EVERYTHING_ENTRY)))
    except Exception:
        return ("failed", "")


def _denies(outcome: Outcome) -> bool:
    if outcome[0] != "value":
        return False
    document = orjson.loads(outcome[1])
    denied = ((document.get("check") or {}).get("deny") or {}) if isinstance(document, dict) else {}
    return any(denied.values())


def reads_of(policy_set: GeneratedSet) -> InputReads:
    return InputReads.of_sources(policy_set.units, libraries=policy_set.libraries)


@dataclass
class Stats:
    sets: int = 0
    parsed: int = 0
    projected: int = 0  # sets with a projection (not the whole input)
    narrowed: int = 0  # comparisons where the projection removed something
    compared: int = 0
    failures: int = 0  # comparisons where both failed
    denied: int = 0  # comparisons where some policy denied
    rvm: int = 0
    features: set[str] = field(default_factory=set)


def differences(policy_set: GeneratedSet, inputs: Iterable[Mapping[str, Any]], stats: Stats | None = None
                ) -> list[str]:
    """Where the engine's answer on the projected input is not its answer on the whole one."""
    stats = stats if stats is not None else Stats()
    stats.sets += 1
    stats.features |= policy_set.features
    engine = _interpreter(policy_set)
    if engine is None:
        return []
    stats.parsed += 1
    projection: Projection | None = reads_of(policy_set).projection(policy_set.skipped)
    if projection is None:
        return []
    stats.projected += 1
    vm = _rvm(policy_set)
    # The aggregate, and each running policy's documents KGWE reads: not its whole package, where an alias
    # rule (`pod := input.request.object`) holds only the part of the input its uses reach.
    queries = [EVERYTHING_QUERY, *(f"data.{policy_set.packages[u]}.{kind}" for u in policy_set.running
                                   for kind in ("deny", "warn", "decision"))]
    found: list[str] = []
    for full in inputs:
        cut = projection.apply(full)
        stats.narrowed += cut != full
        for query in queries:
            whole, projected = _ask(engine, query, full), _ask(engine, query, cut)
            stats.compared += 1
            stats.failures += whole[0] == "failed"
            stats.denied += query == EVERYTHING_QUERY and _denies(whole)
            if whole != projected:
                found.append(f"{query}: whole input {whole!r}, projected {projected!r}\ninput: {orjson.dumps(full)!r}"
                             f"\nprojected: {orjson.dumps(cut)!r}\ntree: {projection.tree}")
        if vm is not None:
            stats.rvm += 1
            whole, projected = _ask_rvm(vm, full), _ask_rvm(vm, cut)
            if whole != projected:
                found.append(f"RVM {EVERYTHING_ENTRY}: whole input {whole!r}, projected {projected!r}"
                             f"\ninput: {orjson.dumps(full)!r}\ntree: {projection.tree}")
    return found


# -- generated sets ---------------------------------------------------------------------------------


def test_generated_sets_answer_the_same_on_the_projected_input() -> None:
    stats = Stats()
    for seed in range(SETS):
        generator = RegoGenerator(seed)
        policy_set = generator.policy_set()
        inputs = [generator.admission_input(policy_set.skipped) for _ in range(INPUTS_PER_SET)]
        found = differences(policy_set, inputs, stats)
        assert not found, f"seed {seed}:\n{policy_set.describe()}\n" + "\n\n".join(found[:3])
    # The generator must keep exercising what it claims to: most sets parse and are projected, the
    # projection removes something, policies deny and fail, and the RVM runs some sets.
    assert stats.parsed >= 0.85 * SETS, stats
    assert stats.projected >= 0.5 * SETS, stats
    assert stats.narrowed >= 0.5 * stats.projected * INPUTS_PER_SET, stats
    assert stats.denied >= 0.1 * stats.projected * INPUTS_PER_SET, stats
    assert 0 < stats.failures < 0.5 * stats.compared, stats
    assert stats.rvm > 0, stats
    assert {"every", "walk", "with", "bare-input", "computed-key", "computed-data-root", "import-alias",
            "import-data", "library", "split-package", "skipped", "other-policy", "head-reads-input",
            "comprehension", "some-k-v", "whole-compare", "else", "default", "decision", "alias"} <= stats.features, (
        stats.features)
    # Reads into collection members (the analysis may cut each member to what is read of it): every way a
    # member is reached, kept whole, counted or passed along.
    assert not MEMBER_FEATURES - stats.features, sorted(MEMBER_FEATURES - stats.features)


# -- hand-written corners ---------------------------------------------------------------------------


def hand_set(units: Mapping[str, Mapping[str, str]], skipped: Iterable[str] = ()) -> GeneratedSet:
    """A set as the loader reads it: a unit per package, its rules found as `inspect_module` finds them,
    a library being a unit without deny/warn/decision."""
    packages: dict[str, str] = {}
    rules: dict[str, frozenset[str]] = {}
    for unit, files in units.items():
        infos = [inspect_module(source) for source in files.values()]
        found = frozenset().union(*(info.rules for info in infos))
        if found:
            packages[unit], rules[unit] = infos[0].package, found
    return GeneratedSet({u: dict(f) for u, f in units.items()}, frozenset(u for u in units if u not in packages),
                        packages, rules, frozenset(skipped))


def _pod(**metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "train-0", "namespace": "team-a", "uid": "u1",
                     "labels": {"app": "trainer", "kgwe.io/x": "bad", "kgwe.io": {"x": "nested"}, "alice": "bad"},
                     "annotations": {"kgwe.io/profile": "1g.10gb", "note": "n"}, **metadata},
        "spec": {"containers": [{"name": "main", "image": "nvcr.io/cuda:12",
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                                {"name": "side", "image": "bad/image", "securityContext": {"privileged": True}}],
                 "nodeSelector": {"nvidia.com/gpu.product": "H100"}},
    }


def _member_pods() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Pods whose members differ where a member read would be cut: twins that differ only in a field few
    policies read (a set of whole members keeps both, a set of their images one), members that are no
    objects, an object of objects to iterate, GPU containers of every kind in every collection."""
    main = {"name": "main", "image": "nvcr.io/cuda:12", "resources": {"limits": {"nvidia.com/gpu": "1"}},
            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "bad"}], "workingDir": "/a"}
    twins = _pod()
    twins["spec"] = {"containers": [main, {**main, "workingDir": "/b"}, {**main, "name": "side", "image": "bad/image",
                                                                         "securityContext": {"privileged": True}}],
                     "initContainers": [{"name": "init", "image": "bad/image", "ports": [{"containerPort": 80}]}]}
    odd = _pod(name="odd")
    side = {"name": "side", "image": "bad/image", "env": [{"name": "A", "value": "2"}, "A=2"]}
    odd["spec"] = {"containers": ["main", 3, None, ["main", "nvcr.io/x"], side, copy.deepcopy(side),  # equal twins
                                  {"name": "plain", "image": "busybox"}, [{"name": "main", "workingDir": "/d"}, 1]],
                   "ephemeralContainers": [{"name": "debug", "image": "busybox",
                                            "resources": {"limits": {"amd.com/gpu": "1"}}}]}
    gpu = _pod(name="gpu", labels={"app": "main", "kgwe.io/x": "bad"})
    gpu["spec"] = {"containers": [{"name": "main", "image": "busybox", "securityContext": {"privileged": True},
                                   "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"},
                                                 "requests": {"nvidia.com/mig-1g.10gb": "1"}}},
                                  {"name": "side", "image": "nvcr.io/cuda:12", "resources": {"limits": {"cpu": "1"}}},
                                  {"name": "plain", "image": "busybox", "workingDir": "/p"}],
                   "initContainers": [{"name": "init", "image": "nvcr.io/cuda:12",
                                       "resources": {"limits": {"amd.com/gpu": "1"}}}]}
    return twins, odd, gpu


def hand_inputs(native: Iterable[str] = ()) -> list[dict[str, Any]]:
    """Requests that differ where the hand-written policies look (and elsewhere)."""
    native = list(native)
    kgwe: dict[str, Any] = {"active": {}, **({"native": dict.fromkeys(native, True)} if native else {})}
    bad = _pod(name="bad", labels={"app": "bad", "kgwe.io/x": "a"})
    other = _pod(annotations={})
    other["spec"]["containers"] = [{"name": "bad", "image": "nvcr.io/x", "env": [{"name": "A", "value": "1"}]}]
    twins, odd, gpu = _member_pods()
    changed = copy.deepcopy(twins)
    changed["spec"]["containers"][0]["workingDir"] = "/changed"
    found = []
    for pod, old, username, operation in [(_pod(), None, "alice", "CREATE"), (bad, _pod(), "bad", "UPDATE"),
                                          (other, bad, "system:x", "DELETE"), ({}, None, "", "CREATE"),
                                          (twins, changed, "alice", "UPDATE"), (odd, None, "bob", "CREATE"),
                                          (gpu, copy.deepcopy(gpu), "alice", "UPDATE"),
                                          # collections and objects of the wrong type (object.get fails)
                                          ({"metadata": [], "spec": {"containers": "none", "initContainers": 7}},
                                           None, "alice", "CREATE")]:
        found.append({
            "request": {"uid": "r1", "operation": operation, "namespace": "team-a", "object": pod, "oldObject": old,
                        "userInfo": {"username": username, "groups": ["g1", "bad"]}, "kind": {"kind": "Pod"}},
            "namespaceObject": {"metadata": {"name": "team-a", "labels": {"app": "trainer", "kgwe.io/tenant": "a"}}},
            "intent": {"gpus": 1, "profile": "1g.10gb"},
            "tenant": {"name": "bad", "tier": "gold"} if username == "bad" else None,
            "params": {},
            "kgwe": kgwe,
        })
    return found


def _unit(package: str, *bodies: str, imports: str = "") -> dict[str, str]:
    """A unit of one package, a file per body."""
    header = f"package {package}\n\nimport rego.v1\n{imports}\n"
    return {f"{package}/{index}.rego": header + body for index, body in enumerate(bodies)}


_DELETE = 'deny contains "op" if input.request.operation == "DELETE"\n'
# What a case's projection must be: "projected", "whole" (None), or a path it keeps whole, or several.
Expected = str | tuple[str, ...] | list[tuple[str, ...]]
# name -> (units, skipped, expected).
CASES: dict[str, tuple[dict[str, dict[str, str]], tuple[str, ...], Expected]] = {
    "input-as-function-argument": ({"gen.p": _unit("gen.p", """
deny contains "bad name" if is_bad(input)
is_bad(doc) if doc.request.object.metadata.name == "bad"
""")}, (), "whole"),
    "input-in-every-domain": ({"gen.p": _unit("gen.p", """
signed if every c in input.request.object.spec.containers { startswith(c.image, "nvcr.io/") }
deny contains "unsigned" if not signed
""")}, (), ("request", "object", "spec", "containers")),
    "every-key-value-over-labels": ({"gen.p": _unit("gen.p", """
warn contains "labels" if every k, v in input.request.object.metadata.labels { k != "kgwe.io/x"; v != "bad" }
""")}, (), ("request", "object", "metadata", "labels")),
    "head-reads-input": ({"gen.p": _unit("gen.p", """
deny contains input.request.object.metadata.name if input.request.operation == "UPDATE"
warn contains sprintf("%v", [input.request.userInfo]) if input.tenant.tier == "gold"
""")}, (), ("request", "userInfo")),
    "default-and-else-chain": ({"gen.p": _unit("gen.p", """
default tier := "none"
tier := "bad" if input.tenant.name == "bad"
kind(x) := "bad" if { x == "bad" } else := input.intent.profile if { x == "" } else := "other"
deny contains sprintf("%v %v", [tier, kind(input.request.userInfo.username)]) if true
""")}, (), ("intent", "profile")),
    "computed-data-root": ({
        "gen.p": _unit("gen.p", """
deny contains "lib says" if {
    name := concat("", ["u", "til"])
    data.gen.lib[name].bad_user
}
"""),
        "gen.lib.util": _unit("gen.lib.util", 'bad_user if input.request.userInfo.username == "bad"\n'),
    }, (), ("request", "userInfo", "username")),
    # An import names a document; its uses read (here none: only _DELETE's own read).
    "import-input-unused": ({"gen.p": _unit("gen.p", _DELETE, imports="import input\n")}, (),
                            ("request", "operation")),
    "import-input-alias": ({"gen.p": _unit("gen.p", 'deny contains "x" if pod.metadata.labels["kgwe.io/x"] == "bad"\n',
                                           imports="import input.request.object as pod\n")},
                           (), ("request", "object", "metadata", "labels", "kgwe.io/x")),
    # Aliases: bodiless rules naming a part of the input, read where they are used.
    "alias-in-a-library": ({
        "gen.p": _unit("gen.p", 'deny contains "x" if pod.pod.metadata.labels.app == "bad"\n',
                       imports="import data.gen.lib.pod\n"),
        "gen.lib.pod": _unit("gen.lib.pod", "pod := input.request.object\n"),
    }, (), ("request", "object", "metadata", "labels", "app")),
    "alias-of-an-alias-in-a-split-package": ({"gen.p": _unit(
        "gen.p", 'deny contains "x" if meta.name == "bad"\n', "pod := input.request.object\nmeta := pod.metadata\n",
    )}, (), ("request", "object", "metadata", "name")),
    "alias-shadowed-by-a-local": ({"gen.p": _unit("gen.p", """
pod := input.request.object
deny contains "x" if { some pod in input.request.object.spec.containers; pod.name == "bad" }
""")}, (), ("request", "object", "spec", "containers", EACH, "name")),
    "alias-package-iterated": ({
        "gen.p": _unit("gen.p", 'deny contains k if { some k, v in data.gen.lib.pod; v.name == "bad" }\n'),
        "gen.lib.pod": _unit("gen.lib.pod", "meta := input.request.object.metadata\n"),
    }, (), ("request", "object", "metadata")),
    "alias-passed-whole": ({"gen.p": _unit("gen.p", """
old := input.request.oldObject
deny contains "x" if json.marshal(old) != "null"
""")}, (), ("request", "oldObject")),
    "alias-with-a-default-is-no-alias": ({"gen.p": _unit("gen.p", """
default pod := {}
pod := input.request.object
deny contains "x" if pod.metadata.name == "bad"
""")}, (), ("request", "object")),
    "import-data-alias": ({
        "gen.p": _unit("gen.p", 'deny contains "x" if u.is_bad(input.request.object.spec.containers[_])\n',
                       imports="import data.gen.lib.util as u\n"),
        "gen.lib.util": _unit("gen.lib.util", """
is_bad(c) if startswith(c.image, "bad/")
is_bad(c) if input.request.namespace == "team-a"
"""),
    }, (), ("request", "namespace")),
    "package-split-across-files": ({"gen.p": _unit(
        "gen.p",
        'deny contains msg if {\n\tbad_tenant\n\tmsg := "tenant"\n}\n',
        'bad_tenant if input.tenant.name == "bad"\n',
    )}, (), ("tenant", "name")),
    "skipped-policy-referenced": ({
        "gen.p1": _unit("gen.p1", 'deny contains "copy" if count(data.gen.p2.deny) > 0\n'),
        "gen.p2": _unit("gen.p2", 'deny contains "ns" if input.request.namespace == "team-a"\n'),
    }, ("gen.p2",), ("request", "namespace")),
    "skipped-policy-not-read": ({
        "gen.p1": _unit("gen.p1", _DELETE),
        "gen.p2": _unit("gen.p2", 'deny contains "ns" if input.request.namespace == "team-a"\n'),
    }, ("gen.p2",), "projected"),
    # Skipped, it is never evaluated: it would fail on the projected input (no name) and not on the whole.
    "skipped-policy-failing-on-the-projection": ({
        "gen.p1": _unit("gen.p1", _DELETE),
        "gen.p2": _unit("gen.p2", 'deny contains "x" if { not input.request.object.metadata.name; to_number("x") }\n'),
    }, ("gen.p2",), "projected"),
    "with-rewrites-input": ({"gen.p": _unit("gen.p", """
op := input.request.operation
deny contains "x" if {
    o := op with input.request.operation as "DELETE"
    o == "DELETE"
}
""")}, (), "whole"),
    "local-named-input": ({"gen.p": _unit("gen.p", 'deny contains "x" if { some input in ["bad"]; input == input }\n')},
                          (), "whole"),
    "package-under-data": ({
        "gen.p": _unit("gen.p", 'deny contains "x" if data.data.lib.bad\n'),
        "data.lib": _unit("data.lib", 'bad if input.request.object.metadata.name == "bad"\n'),
    }, (), ("request", "object", "metadata", "name")),
    "parent-package-ref-head": ({
        "gen.p1": _unit("gen.p1", _DELETE),
        "gen": _unit("gen", 'p1.deny contains "from parent" if input.request.object.metadata.name == "bad"\n'),
    }, (), ("request", "object", "metadata", "name")),
    "whole-object-comparison": ({"gen.p": _unit("gen.p", """
deny contains "changed" if input.request.object.metadata.labels != input.request.oldObject.metadata.labels
warn contains "app" if input.request.object.metadata.labels.app == "bad"
warn contains "ns" if input.request.object.metadata.labels == input.namespaceObject.metadata.labels
""")}, (), ("request", "object", "metadata", "labels")),
    "walk-and-marshal": ({"gen.p": _unit("gen.p", """
deny contains "walked" if { walk(input.request.object.spec, [p, v]); v == "bad/image" }
warn contains json.marshal(input.request.object.metadata.annotations) if true
""")}, (), ("request", "object", "spec")),
    "dotted-bracket-keys": ({"gen.p": _unit("gen.p", """
deny contains "x" if input.request.object.metadata.labels["kgwe.io/x"] == "bad"
warn contains "gpu" if input.request.object.spec.nodeSelector["nvidia.com/gpu.product"] == "H100"
""")}, (), ("request", "object", "metadata", "labels", "kgwe.io/x")),
    "object-get-path": ({"gen.p": _unit("gen.p", """
deny contains "x" if object.get(input.request.object, ["metadata", "labels", "app"], "none") == "bad"
""")}, (), ("request", "object", "metadata", "labels", "app")),
    "object-get-on-input": ({"gen.p": _unit("gen.p", """
deny contains "x" if object.get(input, ["tenant", "name"], "none") == "bad"
""")}, (), ("tenant", "name")),
    "key-iteration": ({"gen.p": _unit("gen.p", """
deny contains k if { some k, v in input.request.object.metadata.annotations; startswith(k, "kgwe.io/") }
warn contains k if { some k, _ in input.request.object.spec.containers[_].resources.limits }
""")}, (), ("request", "object", "spec", "containers", EACH, "resources", "limits")),
    "computed-key-below-input": ({"gen.p": _unit("gen.p", """
deny contains "old bad" if {
    k := concat("", ["old", "Object"])
    input.request[k].metadata.name == "bad"
}
""")}, (), ("request", EACH, "metadata", "name")),
    "input-inside-an-index": ({"gen.p": _unit("gen.p", """
deny contains "x" if input.request.object.metadata.labels[input.request.userInfo.username] == "bad"
""")}, (), ("request", "userInfo", "username")),
    "computed-key-at-root": ({"gen.p": _unit("gen.p", """
warn contains "root" if { k := concat("", ["ten", "ant"]); input[k].name == "bad" }
""")}, (), "whole"),
    "numeric-index": ({"gen.p": _unit("gen.p", """
deny contains "first" if input.request.object.spec.containers[0].image == "bad/image"
warn contains "second" if input.request.object.spec.containers[1].securityContext.privileged
""")}, (), ("request", "object", "spec", "containers", EACH, "image")),
    "comprehensions": ({"gen.p": _unit("gen.p", """
images := {c.image | some c in input.request.object.spec.containers}
by_name := {c.name: c.image | some c in input.request.object.spec.containers}
groups := [g | some g in input.request.userInfo.groups; g != "g1"]
deny contains sprintf("%v", [by_name]) if { "bad/image" in images; count(groups) > 0 }
""")}, (), ("request", "userInfo", "groups")),
    "decision-rule": ({"gen.p": _unit("gen.p", """
decision := {"profile": input.intent.profile} if input.request.object.metadata.labels.app == "trainer"
deny contains "none" if not input.intent.gpus
""")}, (), ("intent", "profile")),
    "params-in-data": ({"gen.p": _unit("gen.p", """
deny contains "over" if input.intent.gpus >= data.kgwe.params["gpu-limit"].limit
""")}, (), ("intent", "gpus")),
    "library-not-referenced": ({
        "gen.p": _unit("gen.p", _DELETE),
        "gen.lib.util": _unit("gen.lib.util", "x := input.request.object\n"),
    }, (), "projected"),
    # Modules in or around the aggregate's package add to the documents KGWE queries (data.kgwe.aggregate),
    # referenced by a policy or not: a deny of their own, a subpackage that fails the whole query.
    "aggregate-package-adds-a-deny": ({
        "gen.p": _unit("gen.p", _DELETE),
        "kgwe.aggregate": _unit("kgwe.aggregate", """
deny.evil := ["bad"] if input.request.object.metadata.name == "bad"
"""),
    }, (), ("request", "object", "metadata", "name")),
    "aggregate-subpackage-fails": ({
        "gen.p": _unit("gen.p", _DELETE),
        "kgwe.aggregate.extra": _unit("kgwe.aggregate.extra", "n := to_number(input.request.object.metadata.name)\n"),
    }, (), ("request", "object", "metadata", "name")),
    # A policy reading the aggregate reaches every policy (and recurses: both inputs fail alike).
    "policy-reads-the-aggregate": ({
        "gen.p1": _unit("gen.p1", 'deny contains "others" if count(data.gen.lib.util.denied) > 1\n'),
        "gen.p2": _unit("gen.p2", 'deny contains "ns" if input.request.namespace == "team-a"\n'),
        "gen.lib.util": _unit("gen.lib.util", "denied := data.kgwe.aggregate.check.deny\n"),
    }, ("gen.p2",), ("request", "namespace")),
    "aggregate-parent-package-ref-head": ({
        "gen.p": _unit("gen.p", _DELETE),
        "kgwe": _unit("kgwe", "aggregate.extra := to_number(input.request.object.metadata.name)\n"),
    }, (), ("request", "object", "metadata", "name")),
}


# -- reads into members -----------------------------------------------------------------------------
# Each construct by which a policy reaches into the members of a collection (the analysis may cut each
# member to what is read of it: projection step EACH), and the adversarial ones where members must stay
# whole. The paths are those the projection must keep whole whether or not it narrows the members.

_CONTAINERS = ("request", "object", "spec", "containers")
_INITS = ("request", "object", "spec", "initContainers")
_EPHEMERAL = ("request", "object", "spec", "ephemeralContainers")
_OLD = ("request", "oldObject", "spec", "containers")


def _each(collection: tuple[str, ...], *steps: str) -> tuple[str, ...]:
    return (*collection, EACH, *steps)


# As rego/lib/pod.rego writes them: an alias, every container through `array.concat` of `object.get`s, a
# function defined three times, an array comprehension keeping the GPU containers whole, a set of them.
_POD_LIBRARY = """
pod := input.request.object

containers := array.concat(
    array.concat(object.get(pod.spec, "containers", []), object.get(pod.spec, "initContainers", [])),
    object.get(pod.spec, "ephemeralContainers", []),
)

is_gpu_container(c) if c.resources.limits["nvidia.com/gpu"]

is_gpu_container(c) if c.resources.limits["amd.com/gpu"]

is_gpu_container(c) if {
    some name, _ in c.resources.limits
    startswith(name, "nvidia.com/mig-")
}

gpu_containers := [c | some c in containers; is_gpu_container(c)]

container_set := {c | some c in containers}
"""
_IS_GPU = """
is_gpu(c) if c.resources.limits["nvidia.com/gpu"]
is_gpu(c) if c.resources.limits["amd.com/gpu"]
is_gpu(c) if {
    some name, _ in c.resources.limits
    startswith(name, "nvidia.com/mig-")
}
"""
MEMBER_CASES: dict[str, tuple[dict[str, dict[str, str]], tuple[str, ...], Expected]] = {
    "member-field": ({"gen.p": _unit("gen.p", """
deny contains c.name if { some c in input.request.object.spec.containers; c.image == "bad/image" }
""")}, (), [_each(_CONTAINERS, "image"), _each(_CONTAINERS, "name")]),
    "member-with-its-index": ({"gen.p": _unit("gen.p", """
deny contains i if { some i, c in input.request.object.spec.containers; i > 0; c.securityContext.privileged }
""")}, (), [_each(_CONTAINERS, "securityContext", "privileged")]),
    "member-every": ({"gen.p": _unit("gen.p", """
signed if every c in input.request.object.spec.containers { is_string(c.image); startswith(c.image, "nvcr.io/") }
deny contains "unsigned" if not signed
warn contains "few" if every i, c in input.request.object.spec.containers { i < 2; c.name != "bad" }
""")}, (), [_each(_CONTAINERS, "image"), _each(_CONTAINERS, "name")]),
    "member-array-comprehension-rule": ({"gen.p": _unit("gen.p", """
gpu := [c | some c in input.request.object.spec.containers; c.resources.limits["nvidia.com/gpu"]]
deny contains c.name if { some c in gpu; c.workingDir != "/a" }
""")}, (), [_each(_CONTAINERS, "resources", "limits", "nvidia.com/gpu"), _each(_CONTAINERS, "name"),
            _each(_CONTAINERS, "workingDir")]),
    "member-computed-index": ({"gen.p": _unit("gen.p", """
deny contains i if {
    some i
    input.request.object.spec.containers[i].image == "bad/image"
    input.request.object.spec.containers[i].name == "side"
}
""")}, (), [_each(_CONTAINERS, "image"), _each(_CONTAINERS, "name")]),
    "member-wildcard-and-constant-index": ({"gen.p": _unit("gen.p", """
deny contains "privileged" if input.request.object.spec.containers[_].securityContext.privileged
warn contains "first" if input.request.object.spec.containers[0].image == "nvcr.io/cuda:12"
warn contains input.request.object.spec.containers[1].name if true
""")}, (), [_each(_CONTAINERS, "securityContext", "privileged"), _each(_CONTAINERS, "image"),
            _each(_CONTAINERS, "name")]),
    # Only how many members there are: the projection keeps every member (perhaps cut to nothing).
    "member-count": ({"gen.p": _unit("gen.p", """
deny contains "many" if count(input.request.object.spec.containers) > 2
warn contains "some" if count(object.get(input.request.object.spec, "initContainers", [])) > 0
""")}, (), "projected"),
    "collection-rules-of-a-library": ({
        "gen.p": _unit("gen.p", """
deny contains c.name if { some c in pod.gpu_containers; not c.securityContext.privileged }
""", imports="import data.gen.lib.pod\n"),
        "gen.lib.pod": _unit("gen.lib.pod", _POD_LIBRARY),
    }, (), [_each(c, *f) for c in (_CONTAINERS, _INITS, _EPHEMERAL)
            for f in (("resources", "limits"), ("name",), ("securityContext", "privileged"))]),
    "collection-rule-through-data": ({
        "gen.p": _unit("gen.p", """
deny contains c.name if { some c in data.gen.lib.pod.containers; c.image == "busybox" }
"""),
        "gen.lib.pod": _unit("gen.lib.pod", _POD_LIBRARY),
    }, (), [_each(c, f) for c in (_CONTAINERS, _INITS, _EPHEMERAL) for f in ("image", "name")]),
    "collection-rule-counted": ({
        "gen.p": _unit("gen.p", 'deny contains "gpus" if count(data.gen.lib.pod.gpu_containers) > 1\n'),
        "gen.lib.pod": _unit("gen.lib.pod", _POD_LIBRARY),
    }, (), [_each(c, "resources", "limits") for c in (_CONTAINERS, _INITS, _EPHEMERAL)]),
    "collection-rule-of-object-get-and-concat": ({"gen.p": _unit("gen.p", """
inits := object.get(input.request.object.spec, "initContainers", [])
every_container := array.concat(input.request.object.spec.containers, inits)
deny contains c.name if { some c in inits; c.ports[0].containerPort == 80 }
warn contains c.name if { some c in every_container; c.image == "bad/image" }
""")}, (), [_each(_INITS, "ports", EACH, "containerPort"), _each(_INITS, "name"), _each(_CONTAINERS, "image"),
            _each(_INITS, "image"),
            _each(_CONTAINERS, "name")]),
    "member-function-of-several-definitions": ({"gen.p": _unit("gen.p", _IS_GPU, """
deny contains c.name if { some c in input.request.object.spec.containers; is_gpu(c) }
""")}, (), [_each(_CONTAINERS, "resources", "limits"), _each(_CONTAINERS, "name")]),
    "member-function-else-chain": ({"gen.p": _unit("gen.p", _IS_GPU, """
kind(c) := "gpu" if { is_gpu(c) } else := "privileged" if { c.securityContext.privileged == true } else := "cpu"
deny contains sprintf("%v %v", [c.name, kind(c)]) if some c in input.request.object.spec.initContainers
warn contains sprintf("%v %v", [c.name, kind(c)]) if some c in input.request.object.spec.containers
""")}, (), [_each(c, *f) for c in (_CONTAINERS, _INITS)
             for f in (("resources", "limits"), ("securityContext", "privileged"), ("name",))]),
    "member-function-returning-part": ({"gen.p": _unit("gen.p", """
resources_of(c) := c.resources
deny contains c.name if {
    some c in input.request.object.spec.containers
    resources_of(c).limits["nvidia.com/gpu"] == "1"
}
""")}, (), [_each(_CONTAINERS, "resources", "limits", "nvidia.com/gpu"), _each(_CONTAINERS, "name")]),
    "member-function-calling-a-function": ({"gen.p": _unit("gen.p", _IS_GPU, """
risky(c) if { is_gpu(c); c.workingDir != "/a" }
deny contains c.name if { some c in input.request.object.spec.containers; risky(c) }
""")}, (), [_each(_CONTAINERS, "resources", "limits"), _each(_CONTAINERS, "workingDir"), _each(_CONTAINERS, "name")]),
    "member-function-iterating-its-parameter": ({"gen.p": _unit("gen.p", """
any_privileged(cs) if { some c in cs; c.securityContext.privileged == true }
deny contains "privileged" if any_privileged(input.request.object.spec.containers)
warn contains "init" if any_privileged(object.get(input.request.object.spec, "initContainers", []))
""")}, (), [_each(_CONTAINERS, "securityContext"), _each(_INITS, "securityContext")]),
    "member-function-reading-the-input-too": ({"gen.p": _unit("gen.p", """
named_as_app(c) if c.name == input.request.object.metadata.labels.app
deny contains c.image if { some c in input.request.object.spec.containers; named_as_app(c) }
""")}, (), [_each(_CONTAINERS, "name"), _each(_CONTAINERS, "image"),
            ("request", "object", "metadata", "labels", "app")]),
    "library-function-of-a-member": ({
        "gen.p": _unit("gen.p", """
deny contains c.name if { some c in input.request.object.spec.containers; lib.is_gpu_container(c) }
""", imports="import data.gen.lib.pod as lib\n"),
        "gen.lib.pod": _unit("gen.lib.pod", _POD_LIBRARY),
    }, (), [_each(_CONTAINERS, "resources", "limits"), _each(_CONTAINERS, "name")]),
    "collection-through-an-input-import": ({"gen.p": _unit("gen.p", """
deny contains c.image if { some c in pod.spec.containers; c.name == "side" }
""", imports="import input.request.object as pod\n")}, (), [_each(_CONTAINERS, "name"), _each(_CONTAINERS, "image")]),
    "collection-through-an-alias": ({"gen.p": _unit("gen.p", """
spec := input.request.object.spec
deny contains c.name if { some c in spec.initContainers; c.image == "bad/image" }
""")}, (), [_each(_INITS, "image"), _each(_INITS, "name")]),
    "member-nested-iteration": ({"gen.p": _unit("gen.p", """
deny contains c.name if { some c in input.request.object.spec.containers; some e in c.env; e.value == "bad" }
""")}, (), [_each(_CONTAINERS, "env", EACH, "value"), _each(_CONTAINERS, "name")]),
    "member-object-of-objects": ({"gen.p": _unit("gen.p", """
deny contains c.name if {
    some c in input.request.object.spec.containers
    some kind, amounts in c.resources
    amounts["nvidia.com/mig-1g.10gb"] == "1"
    kind == "requests"
}
""")}, (), [_each(_CONTAINERS, "resources", EACH, "nvidia.com/mig-1g.10gb"), _each(_CONTAINERS, "name")]),
    "object-values-iterated": ({"gen.p": _unit("gen.p", """
deny contains k if { some k, v in input.request.object.metadata.labels; v == "bad" }
""")}, (), ("request", "object", "metadata", "labels")),
    "member-field-compared-with-another-member": ({"gen.p": _unit("gen.p", """
deny contains c.name if {
    some c in input.request.object.spec.containers
    some d in input.request.object.spec.initContainers
    c.image == d.image
}
""")}, (), [_each(_CONTAINERS, "image"), _each(_INITS, "image"), _each(_CONTAINERS, "name")]),
    "comprehension-of-a-field": ({"gen.p": _unit("gen.p", """
names := [c.name | some c in input.request.object.spec.containers]
deny contains "same name twice" if count(names) != count({n | some n in names})
images := {c.image | some c in input.request.object.spec.containers}
warn contains "two images" if count(images) == 2
""")}, (), [_each(_CONTAINERS, "name"), _each(_CONTAINERS, "image")]),
    # Members that must stay whole.
    "set-of-members-counted": ({"gen.p": _unit("gen.p", """
deny contains "equal twins" if {
    count({c | some c in input.request.object.spec.containers}) < count(input.request.object.spec.containers)
}
warn contains "two" if count({c | some c in input.request.object.spec.containers; c.image == "nvcr.io/cuda:12"}) == 2
""")}, (), _each(_CONTAINERS)),
    "set-of-members-in-a-library": ({
        "gen.p": _unit("gen.p", 'deny contains "equal" if count(pod.container_set) != count(pod.containers)\n',
                       imports="import data.gen.lib.pod\n"),
        "gen.lib.pod": _unit("gen.lib.pod", _POD_LIBRARY),
    }, (), [_each(_CONTAINERS), _each(_INITS), _each(_EPHEMERAL)]),
    # Keys must be unique: twins under one name (differing in a field no rule reads) fail the query, and
    # would not if cut to the same value.
    "object-of-members-by-name": ({"gen.p": _unit("gen.p", """
by_name := {c.name: c | some c in input.request.object.spec.containers; is_string(c.name)}
deny contains "side" if by_name.side.image == "bad/image"
""")}, (), _each(_CONTAINERS)),
    "member-marshalled": ({"gen.p": _unit("gen.p", """
deny contains c.name if { some c in input.request.object.spec.containers; contains(json.marshal(c), "/b") }
""")}, (), _each(_CONTAINERS)),
    "member-walked": ({"gen.p": _unit("gen.p", """
deny contains c.image if { some c in input.request.object.spec.containers; walk(c, [path, v]); v == "bad" }
""")}, (), _each(_CONTAINERS)),
    "member-keys": ({"gen.p": _unit("gen.p", """
deny contains c.name if {
    some c in input.request.object.spec.containers
    is_object(c)
    "workingDir" in object.keys(c)
}
""")}, (), _each(_CONTAINERS)),
    "member-unified-with-the-old-one": ({"gen.p": _unit("gen.p", """
deny contains c.name if {
    some c in input.request.object.spec.containers
    c = input.request.oldObject.spec.containers[0]
}
""")}, (), [_each(_CONTAINERS), _each(_OLD)]),
    # regorus (unlike OPA) matches an object pattern against an object with more keys: the pattern reads its
    # keys. Equality with an object reads the member whole.
    "member-unified-with-a-pattern": ({"gen.p": _unit("gen.p", """
deny contains n if { some c in input.request.object.spec.containers; {"name": n, "image": i} = c; i != "" }
""")}, (), [_each(_CONTAINERS, "name"), _each(_CONTAINERS, "image")]),
    "member-equal-to-an-object": ({"gen.p": _unit("gen.p", """
deny contains "plain" if { some c in input.request.object.spec.containers; c == {"name": "plain", "image": "busybox"} }
""")}, (), _each(_CONTAINERS)),
    "member-destructured": ({"gen.p": _unit("gen.p", """
deny contains b if { some [a, b] in input.request.object.spec.containers; a == "main" }
warn contains json.marshal(a) if { some [a, _] in input.request.object.spec.containers; is_object(a) }
""")}, (), _each(_CONTAINERS)),
    "member-whole-in-the-head": ({"gen.p": _unit("gen.p", """
deny contains sprintf("%v", [c]) if { some c in input.request.object.spec.containers; c.name == "side" }
""")}, (), _each(_CONTAINERS)),
    "member-whole-in-a-function-value": ({"gen.p": _unit("gen.p", """
pair(c) := [c.name, c]
deny contains n if {
    some c in input.request.object.spec.containers
    p := pair(c)
    count(p[1]) > 5
    n := p[0]
}
""")}, (), _each(_CONTAINERS)),
    # Names that are not what they seem.
    "local-shadowing-a-collection-rule": ({"gen.p": _unit("gen.p", """
containers := input.request.object.spec.initContainers
deny contains c.name if {
    containers := input.request.object.spec.containers
    some c in containers
    c.image == "bad/image"
}
warn contains c.name if { some c in containers; c.ports[0].containerPort == 80 }
""")}, (), [_each(_CONTAINERS, "image"), _each(_CONTAINERS, "name"), _each(_INITS, "ports"), _each(_INITS, "name")]),
    "local-shadowing-a-library-import": ({
        "gen.p": _unit("gen.p", """
deny contains c.name if { pod := input.request.oldObject; some c in pod.spec.containers; c.image == "busybox" }
warn contains c.name if { some c in pod.containers; c.workingDir == "/b" }
""", imports="import data.gen.lib.pod\n"),
        "gen.lib.pod": _unit("gen.lib.pod", _POD_LIBRARY),
    }, (), [_each(_OLD, "image"), _each(_OLD, "name"), _each(_CONTAINERS, "workingDir")]),
    "member-variable-bound-again": ({"gen.p": _unit("gen.p", """
deny contains d.name if { some c in input.request.object.spec.containers; d := c; d.workingDir == "/b" }
warn contains c.name if {
    some c in input.request.object.spec.containers
    is_object(c)
    every c in object.get(c, "env", []) { c.name != "B" }
}
""")}, (), [_each(_CONTAINERS, "workingDir"), _each(_CONTAINERS, "env"), _each(_CONTAINERS, "name")]),
    "members-read-whole-only-by-a-skipped-policy": ({
        "gen.p1": _unit("gen.p1", """
deny contains c.name if { some c in input.request.object.spec.containers; c.image == "bad/image" }
"""),
        "gen.p2": _unit("gen.p2", 'deny contains json.marshal(c) if some c in input.request.object.spec.containers\n'),
    }, ("gen.p2",), [_each(_CONTAINERS, "image"), _each(_CONTAINERS, "name")]),
    "members-rewritten-by-with": ({
        "gen.p": _unit("gen.p", """
deny contains "gpu" if {
    n := count(data.gen.lib.pod.gpu_containers) with input.request.object.spec.containers as [{"name": "x"}]
    n == 0
}
"""),
        "gen.lib.pod": _unit("gen.lib.pod", _POD_LIBRARY),
    }, (), "whole"),
}
# regorus evaluates every rule of a package a policy reaches through an import: a rule no policy
# references still fails the query where it fails on the whole input, so its reads count (a module
# counts whole), and a collection rule's collections are kept where nothing iterates it (object.get
# fails on a non-object).
CASES["a-library-rule-no-policy-references"] = ({
    "gen.p": _unit("gen.p", 'deny contains "ok" if util.ok\n', imports="import data.gen.lib.util\n"),
    "gen.lib.util": _unit("gen.lib.util", "ok := true\n\nbad := sum(input.request.object.spec.containers)\n"),
}, (), [_CONTAINERS])
CASES["a-collection-rule-nothing-iterates"] = ({
    "gen.p": _unit("gen.p", 'deny contains "ok" if util.ok\n', imports="import data.gen.lib.util\n"),
    "gen.lib.util": _unit("gen.lib.util", """ok := true

labels := object.get(input.request.object.metadata, "labels", {})

everything := array.concat(input.request.object.spec.containers, input.request.object.spec.initContainers)
"""),
}, (), "projected")
ALL_CASES = {**CASES, **MEMBER_CASES}


def _kept(tree: Mapping[str, Any] | None, path: tuple[str, ...]) -> bool:
    """Whether the projection keeps the whole subtree at `path` (an `EACH` step: of every member)."""
    node: Any = tree
    for key in path:
        if node is None:
            return True
        if isinstance(node, Each):
            if key != EACH:
                return False
            node = node.below
            continue
        if key == EACH or key not in node:
            return False
        node = node[key]
    return node is None


@pytest.mark.parametrize("name", sorted(ALL_CASES))
def test_hand_written_corner(name: str) -> None:
    units, skipped, expected = ALL_CASES[name]
    policy_set = hand_set(units, skipped)
    assert _interpreter(policy_set) is not None, "the case must parse"
    found = differences(policy_set, hand_inputs(policy_set.skipped))
    assert not found, "\n\n".join(found)
    projection = reads_of(policy_set).projection(policy_set.skipped)
    if expected == "whole":
        assert projection is None
    else:
        assert projection is not None
        for path in [expected] if isinstance(expected, tuple) else expected if isinstance(expected, list) else []:
            assert _kept(projection.tree, path), (path, projection.tree)


@pytest.mark.parametrize("name", sorted(MEMBER_CASES))
def test_member_cases_answer_differently_across_the_inputs(name: str) -> None:
    """A member case checks something only where its answer depends on the members: on the hand-written
    inputs it must answer (not fail everywhere) and answer differently."""
    units, skipped, _ = MEMBER_CASES[name]
    policy_set = hand_set(units, skipped)
    engine = _interpreter(policy_set)
    assert engine is not None
    outcomes = [_ask(engine, EVERYTHING_QUERY, document) for document in hand_inputs(policy_set.skipped)]
    assert any(kind == "value" for kind, _ in outcomes), outcomes
    assert len(set(outcomes)) > 1, outcomes


# -- what the answer memo may remember --------------------------------------------------------------

_CLOCK = 'deny contains "odd second" if time.now_ns() % 2 == 1\n'
# name -> (units, skipped, whether answers may be remembered: no impure built-in among the running modules)
PURITY: dict[str, tuple[dict[str, dict[str, str]], tuple[str, ...], bool]] = {
    "pure": ({"gen.p": _unit("gen.p", _DELETE)}, (), True),
    "clock-in-a-running-policy": ({"gen.p": _unit("gen.p", _CLOCK)}, (), False),
    "clock-through-brackets": ({"gen.p": _unit("gen.p", 'deny contains "x" if time["now_ns"]() > 0\n')}, (), False),
    "random-in-a-called-library": ({
        "gen.p": _unit("gen.p", 'deny contains "x" if data.gen.lib.util.coin == 1\n'),
        "gen.lib.util": _unit("gen.lib.util", 'coin := rand.intn("coin", 2)\n'),
    }, (), False),
    "uuid-in-a-split-file": ({"gen.p": _unit("gen.p", "deny contains id if id := fresh\n",
                                             'fresh := uuid.rfc4122("a")\n')}, (), False),
    "runtime-in-a-message": ({"gen.p": _unit("gen.p", 'warn contains sprintf("%v", [opa.runtime()]) if true\n')},
                             (), False),
    "http-in-a-helper": ({"gen.p": _unit("gen.p", """
reply := http.send({"method": "GET", "url": "http://127.0.0.1:9/"})
deny contains "x" if reply.status_code == 200
""")}, (), False),
    "clock-in-a-skipped-policy": ({
        "gen.p1": _unit("gen.p1", _DELETE),
        "gen.p2": _unit("gen.p2", _CLOCK),
    }, ("gen.p2",), True),
    "clock-in-an-unreferenced-library": ({
        "gen.p": _unit("gen.p", _DELETE),
        "gen.lib.util": _unit("gen.lib.util", "now := time.now_ns()\n"),
    }, (), True),
    "clock-in-the-aggregate-package": ({
        "gen.p": _unit("gen.p", _DELETE),
        "kgwe.aggregate.extra": _unit("kgwe.aggregate.extra", "now := time.now_ns()\n"),
    }, (), False),
}


@pytest.mark.parametrize("name", sorted(PURITY))
def test_answers_are_remembered_only_without_impure_builtins(name: str) -> None:
    units, skipped, deterministic = PURITY[name]
    policy_set = hand_set(units, skipped)
    assert _interpreter(policy_set) is not None, "the case must parse"
    projection = reads_of(policy_set).projection(policy_set.skipped)
    assert projection is not None
    assert projection.deterministic is deterministic


# -- through the runtime ----------------------------------------------------------------------------

RUNTIME_SETS = tries(2, 12)


def _write(policy_set: GeneratedSet, directory: Path) -> None:
    for name, source in policy_set.modules().items():
        path = directory / name.split(":", 1)[1]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)


def _context(document: Mapping[str, Any], cluster: dict[str, Any]) -> PolicyContext:
    intent, tenant = document["intent"], document["tenant"]
    return PolicyContext(request=copy.deepcopy(document["request"]), namespace_object=document["namespaceObject"],
                         cluster=cluster, intent=intent if isinstance(intent, dict) else {},
                         tenant=tenant if isinstance(tenant, str) else None)


def _answer(runtime: PolicyRuntime, context: PolicyContext) -> Any:
    decision, violations = runtime.evaluate(context)
    return decision.fields, decision.decided_by, sorted((v.policy, v.action, v.message) for v in violations)


def test_the_runtime_answers_as_with_the_whole_input(tmp_path: Path, cluster_summary: dict[str, Any]) -> None:
    """Generated admin Rego next to the built-ins, through `PolicyRuntime.evaluate`: with the built-ins
    answered natively, the engine on the projected input and the answer memo, every request (replicas that
    differ only in their identity included) gets the answer of a runtime whose engine answers everything
    on the whole input. On the interpreter: the RVM's own blind spot (a built-in failing on a value no
    probe had, policies/engines/rego_rvm.py) is not the projection's to judge."""
    compared = 0
    for seed in range(RUNTIME_SETS):
        generator = RegoGenerator(10_000 + seed)
        policy_set = generator.policy_set()
        directory = tmp_path / str(seed)
        _write(policy_set, directory)
        projecting = comparing_runtime(rego_vm="off")
        whole = comparing_runtime(rego_vm="off")
        whole.native_builtins = False
        assert projecting.reload(builtin=True, directories=[str(directory)]).ok == \
            whole.reload(builtin=True, directories=[str(directory)]).ok
        whole._set.reads = None  # the engine is handed the whole input, as before projections
        for _ in range(INPUTS_PER_SET):
            document = generator.admission_input()
            for replica in range(3):
                context = _context(document, cluster_summary)
                pod = context.request.get("object")
                if replica and isinstance(pod, dict) and isinstance(pod.get("metadata"), dict):
                    pod["metadata"].update(name=f"worker-{replica}", uid=f"uid-{replica}")
                assert _answer(projecting, context) == _answer(whole, context), (
                    f"seed {10_000 + seed}:\n{policy_set.describe()}\ninput: {document}")
                compared += 1
    assert compared == RUNTIME_SETS * INPUTS_PER_SET * 3


def test_an_answer_with_a_random_number_is_never_remembered(tmp_path: Path, cluster_summary: dict[str, Any]) -> None:
    (tmp_path / "coin.rego").write_text(
        "package admin.coin\n\nimport rego.v1\n\n"
        'deny contains sprintf("%d", [rand.intn("coin", 1000000000)]) if input.request.operation == "CREATE"\n')
    runtime = comparing_runtime()
    assert runtime.reload(builtin=True, directories=[str(tmp_path)]).ok
    # A well-formed pod: on a hostile one (a container name that is no string) a built-in's `%q` fails
    # the engine's query, and no policy's answer comes back at all.
    document = hand_inputs()[0]
    document["request"]["operation"] = "CREATE"
    messages = {message for _ in range(3)
                for policy, _, message in _answer(runtime, _context(document, cluster_summary))[2] if "coin" in policy}
    assert len(messages) == 3
