"""Seeded random Rego policy sets and admission inputs, for the differential test of the input projection
(policies/engines/rego_reads.py, tests/policies/test_rego_projection_differential.py).

`RegoGenerator(seed).policy_set()` returns a `GeneratedSet`: units as the loader makes them (unit name ->
file name -> source), which of them are libraries (no deny/warn/decision rules), and which policy units
the request answers natively (`input.kgwe.native`). `RegoGenerator(seed).admission_input(native)` returns
an input shaped as `PolicyRuntime._rego_input` makes it.

The modules are rego.v1 and reach the input every way the language allows: dotted and bracket refs
(keys with dots and slashes, `labels["kgwe.io/x"]`), computed keys (`input[k]`, `input.request[k]`),
`import input.request.object as pod`, `import input`, bare `input` as a function argument,
`object.get`, `walk`, `json.marshal`, `some x in`, `some k, v in`, `[_]`, `every`, comprehensions of
the three kinds, `not`, whole-object comparisons, rule heads that read the input, helper rules and
functions with `else` chains and defaults, `with input.x as y`, library packages called through
`data.gen.lib.lN` or an import, references to other policies' packages (some of them skipped), a
package split across two files, and `data` references with a computed root.

Member flows (`features` names them `member-*` and `collection-*`): `some c in X`, `some k, c in X`,
`every`, comprehensions of the three kinds over members, `X[i].f`, `X[_].f`, `X[0].f`, `count(X)`, nested
iteration (`some e in c.env`), objects iterated by value (`some k, v in c.resources`), member fields in
rule heads; collections named by rules defined once without a body (an input collection, an `object.get`,
an `array.concat` of such, an array comprehension keeping members whole, a set comprehension of
members), in the policy's package or in a library as rego/lib/pod.rego writes them (`containers`,
`gpu_containers`, `is_gpu_container` defined three times), reached through an import or a `data.` ref;
functions of a member (several definitions, an else chain, one returning part of its argument, one
calling another with its parameter, one with its parameter whole in its value, one iterating its
parameter). And the uses that need members whole: sets of members counted, `json.marshal(c)`,
`walk(c, ...)`, `object.keys(c)`, `c = <input ref>`, `some [a, b] in X`, a local variable that shadows a
collection rule's name, a member variable bound again, `with` replacing the members. Half the sets
(`member_focus`) read no container collection whole outside these flows, so that an analysis cutting
members has room to cut, and to cut too much.

The inputs vary presence, types (a string where an object is expected, a number where a string is,
null, empty objects and lists), nesting and values drawn from small pools, so conditions hold about as
often as not and built-ins sometimes fail on a wrong type (failures are compared too). Container
collections (containers, init and ephemeral ones) are missing, empty, or hold members that differ field
by field (images and names the set's policies compare with come more often), members that are no
objects (strings, numbers, null, arrays to destructure), and twins: copies of a member that differ only in
one field (or none), which a set of whole members keeps apart and a set of one field does not.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

Rego = str

# Where the input holds something, as Rego references, with what is usually found there: "str", "num",
# "bool", "obj" (an object), "arr" (an array), "any". The inputs put other types there now and then.
INPUT_REFS: list[tuple[Rego, str]] = [
    ("input.request.operation", "str"),
    ("input.request.uid", "str"),
    ("input.request.namespace", "str"),
    ("input.request.dryRun", "bool"),
    ("input.request.kind", "obj"),
    ("input.request.kind.kind", "str"),
    ("input.request.userInfo", "obj"),
    ("input.request.userInfo.username", "str"),
    ("input.request.userInfo.groups", "arr"),
    ("input.request.userInfo.groups[0]", "str"),
    ("input.request.object", "obj"),
    ("input.request.object.metadata", "obj"),
    ("input.request.object.metadata.name", "str"),
    ("input.request.object.metadata.namespace", "str"),
    ("input.request.object.metadata.labels", "obj"),
    ("input.request.object.metadata.labels.app", "str"),
    ('input.request.object.metadata.labels["kgwe.io/x"]', "str"),
    ('input.request.object.metadata.labels["kgwe.io/tier"]', "str"),
    ("input.request.object.metadata.annotations", "obj"),
    ('input.request.object.metadata.annotations["kgwe.io/profile"]', "str"),
    ('input["request"]["object"]["metadata"]["annotations"]["kgwe.io/x"]', "str"),
    ("input.request.object.spec", "obj"),
    ("input.request.object.spec.containers", "arr"),
    ("input.request.object.spec.containers[0]", "obj"),
    ("input.request.object.spec.containers[0].image", "str"),
    ("input.request.object.spec.containers[_].image", "str"),
    ("input.request.object.spec.containers[_].name", "str"),
    ('input.request.object.spec.containers[_].resources.limits["nvidia.com/gpu"]', "str"),
    ("input.request.object.spec.containers[_].securityContext.privileged", "bool"),
    ("input.request.object.spec.containers[_].env", "arr"),
    ("input.request.object.spec.initContainers", "arr"),
    ("input.request.object.spec.nodeSelector", "obj"),
    ('input.request.object.spec.nodeSelector["nvidia.com/gpu.product"]', "str"),
    ("input.request.object.spec.runtimeClassName", "str"),
    ("input.request.object.spec.hostNetwork", "bool"),
    ("input.request.object.spec.tolerations", "arr"),
    ("input.request.oldObject", "obj"),
    ("input.request.oldObject.metadata.labels", "obj"),
    ("input.request.oldObject.metadata.labels.app", "str"),
    ("input.request.oldObject.spec.containers[_].image", "str"),
    ("input.namespaceObject", "obj"),
    ("input.namespaceObject.metadata.name", "str"),
    ("input.namespaceObject.metadata.labels", "obj"),
    ('input.namespaceObject.metadata.labels["kgwe.io/tenant"]', "str"),
    ("input.intent", "obj"),
    ("input.intent.gpus", "num"),
    ("input.intent.profile", "str"),
    ("input.intent.shareable", "bool"),
    ("input.tenant", "any"),
    ("input.tenant.name", "str"),
    ("input.params", "obj"),
    ("input.params.limit", "num"),
    ("input.kgwe.active", "obj"),
    # An index that is itself read from the input.
    ("input.request.object.metadata.labels[input.intent.profile]", "str"),
    ("input.namespaceObject.metadata.labels[input.request.object.metadata.labels.app]", "str"),
]
# The same places through `import input.request.object as pod`.
POD_REFS: list[tuple[Rego, str]] = [
    ("pod.metadata.name", "str"),
    ("pod.metadata.labels", "obj"),
    ('pod.metadata.labels["kgwe.io/x"]', "str"),
    ("pod.spec.containers", "arr"),
    ("pod.spec.containers[_].image", "str"),
    ("pod.spec", "obj"),
]
# Pairs worth comparing whole.
WHOLE_PAIRS: list[tuple[Rego, Rego]] = [
    ("input.request.object.metadata.labels", "input.request.oldObject.metadata.labels"),
    ("input.request.object.spec.containers", "input.request.oldObject.spec.containers"),
    ("input.request.object.metadata.namespace", "input.namespaceObject.metadata.name"),
    ("input.request.object.metadata.labels", "input.namespaceObject.metadata.labels"),
    ("input.intent", "input.params"),
    ("input.request.object.metadata", "input.request.oldObject.metadata"),
]
# Input collections whose members policies iterate, with what a member usually is: "container", "env" (a
# name/value object), "toleration", "str". Labels are an object: `some c in` iterates its values.
INPUT_COLLECTIONS: list[tuple[Rego, str]] = [
    ("input.request.object.spec.containers", "container"),
    ("input.request.object.spec.containers", "container"),
    ("input.request.object.spec.initContainers", "container"),
    ("input.request.object.spec.ephemeralContainers", "container"),
    ("input.request.oldObject.spec.containers", "container"),
    ('input["request"]["object"]["spec"]["containers"]', "container"),
    ("input.request.object.spec.containers[0].env", "env"),
    ("input.request.object.spec.tolerations", "toleration"),
    ("input.request.userInfo.groups", "str"),
    ("input.request.object.metadata.labels", "str"),
]
# What a policy reads of one member, by kind of member ({c}: the member variable).
MEMBER_READS: dict[str, list[Rego]] = {
    "container": [
        "{c}.image == {image}", "{c}.image == {image}", "{c}.name == {name}", "{c}.name != {name}",
        '{c}.resources.limits["nvidia.com/gpu"] == "1"', "{c}.securityContext.privileged == true",
        '{c}.env[_].name == "A"', "{c}.ports[0].containerPort == 80", '{c}.resources.requests["nvidia.com/gpu"]',
    ],
    "env": ['{c}.name == "A"', "{c}.value == {lit}", "{c}.valueFrom"],
    "toleration": ['{c}.key == "nvidia.com/gpu"', '{c}.effect == "NoSchedule"'],
    "str": ["{c} == {lit}"],
}
# Values the generated containers hold, for comparisons that hold about as often as not.
IMAGES = ["nvcr.io/cuda:12", "bad/image", "busybox", "a", "gpu-job", "bad"]
NAMES = ["main", "side", "bad", "a"]
STRINGS = ["a", "b", "bad", "gpu-job", "x", "kgwe.io/x", "", "CREATE", "UPDATE", "nvcr.io/cuda:12"]
PREFIXES = ["b", "a", "nvcr.io/", "kgwe.io/", "g", ""]
KEYS = ["app", "kgwe.io/x", "kgwe.io/tier", "team", "nvidia.com/gpu", "name", "image"]


# Where members live: a reference that names one of these, or a part of the input above one, or a member
# whole (`containers[0]`), reads the members whole.
_MEMBER_HOLDERS = ("input.request.object.spec.containers", "input.request.object.spec.initContainers",
                   "input.request.object.spec.ephemeralContainers", "input.request.oldObject.spec.containers",
                   "pod.spec.containers", "pod.spec.initContainers")


def whole_members(ref: Rego) -> bool:
    """Whether `ref` reads members of a container collection whole (so no reads into them can be cut)."""
    return any(holder.startswith(ref) for holder in _MEMBER_HOLDERS) or ref.endswith("containers[0]")


@dataclass
class GeneratedSet:
    """One policy set: units (name -> file -> source), libraries among them, and the policy units the
    request answers natively (skipped by the engine)."""

    units: dict[str, dict[str, str]]
    libraries: frozenset[str]
    packages: dict[str, str]  # policy unit -> its package, dotted
    rules: dict[str, frozenset[str]]  # policy unit -> which of deny/warn/decision it defines
    skipped: frozenset[str] = frozenset()
    features: set[str] = field(default_factory=set)  # what the set uses, for the coverage check

    def modules(self) -> dict[str, str]:
        return {name: source for files in self.units.values() for name, source in files.items()}

    @property
    def running(self) -> list[str]:
        return [unit for unit in self.packages if unit not in self.skipped]

    def describe(self) -> str:
        return "\n".join(f"--- {name} ({'library' if unit in self.libraries else 'policy'} {unit})\n{source}"
                         for unit, files in self.units.items() for name, source in files.items())


# The type check that keeps a condition's built-in from failing, by template.
_COLLECTION = 'type_name({0}) in {{"object", "array", "set"}}'
_GUARDS: dict[int, str] = {
    2: 'type_name({0}) in {{"object", "array", "set", "string"}}', 3: "is_string({0})", 6: "is_object({0})",
    7: _COLLECTION, 8: _COLLECTION, 9: _COLLECTION, 12: _COLLECTION, 13: _COLLECTION, 14: _COLLECTION,
    19: "is_string({0})",
}


class _Module:
    """One module being written: its fresh variable names, helpers and rules."""

    def __init__(self, gen: RegoGenerator, package: str, libraries: list[str], others: list[str],
                 numbered_from: int = 0) -> None:
        self.gen = gen
        self.rng = gen.rng
        self.package = package
        self.libraries = libraries  # library packages this module may call
        self.others = others  # other policy packages it may reference
        self.imports: list[str] = []
        self.rules: list[str] = []
        self.helpers: list[str] = []  # helper rule names (values)
        self.functions: list[str] = []  # one-argument helper function names
        self.aliases: list[str] = []  # bodiless rules naming a part of the input (`a3 := input.request.object`)
        self.pod_alias = False
        self.imported_libs: dict[str, str] = {}  # library package -> the name its import binds
        self._count = numbered_from
        self.features: set[str] = set()
        self.alias_targets: dict[str, str] = {}  # alias -> the input reference it names
        self.collections: list[tuple[str, str]] = []  # collection rules of this module: (name, kind of member)
        self.member_functions: dict[str, str] = {}  # style -> the name of this module's function of a member
        self.main = numbered_from == 0  # the package's first file: the one that may name a rule `containers`

    def fresh(self, stem: str) -> str:
        self._count += 1
        return f"{stem}{self._count}"

    # -- values -----------------------------------------------------------------------------------

    def input_ref(self) -> tuple[Rego, str]:
        rng = self.rng
        if self.pod_alias and rng.random() < 0.25:
            self.features.add("import-alias")
            return rng.choice(self.gen.usable(POD_REFS))
        ref, kind = rng.choice(self.gen.usable(INPUT_REFS))
        if "[" in ref:
            self.features.add("bracket")
        return ref, kind

    def value(self, depth: int = 0) -> tuple[Rego, str, list[str]]:
        """A value expression, its usual type, and body statements that must come before it."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.06 and self.aliases:
            # Through an alias: read where it is used, as far as the use reaches.
            self.features.add("alias")
            alias = rng.choice(self.aliases)
            step = rng.choice(["", f".{rng.choice(['metadata', 'spec', 'labels', 'app', 'name'])}",
                               f'["{rng.choice(KEYS)}"]', "[_]"])
            return f"{alias}{step}", "any", []
        if depth < 2 and roll < 0.08 and self.helpers:
            self.features.add("helper-rule")
            return rng.choice(self.helpers), "any", []
        if depth < 2 and roll < 0.14 and self.functions:
            self.features.add("helper-function")
            inner, _, pre = self.value(depth + 1)
            return f"{rng.choice(self.functions)}({inner})", "any", pre
        if depth < 2 and roll < 0.22 and self.libraries:
            return self.library_value(depth)
        if roll < 0.26 and self.others:
            other = rng.choice(self.others)
            self.features.add("other-policy")
            return f"count(data.{other}.deny)", "num", []
        if roll < 0.30:
            # A computed key: the whole of what it indexes is read.
            key = self.fresh("k")
            roots = [("input.request.object.metadata.labels", rng.choice(['"app"', 'concat("/", ["kgwe.io", "x"])']))]
            if not self.gen.member_focus:  # `input.request[k]` reads every container whole
                roots.append(("input.request", rng.choice(['"object"', 'lower("OBJECT")', '"oldObject"'])))
            root, key_text = rng.choice(roots if rng.random() < 0.9 else
                                        [("input", rng.choice(['"tenant"', 'concat("", ["int", "ent"])']))])
            self.features.add("computed-key")
            return f"{root}[{key}]", "any", [f"{key} := {key_text}"]
        if roll < 0.34:
            self.features.add("object.get")
            if rng.random() < 0.1:
                self.features.add("bare-input")
                return ('object.get(input, ["request", "object", "metadata", "labels", "app"], "none")',
                        "str", [])
            ref, _ = rng.choice([r for r in INPUT_REFS if r[1] == "obj"])
            return f'object.get({ref}, "{rng.choice(KEYS)}", "none")', "any", []
        if roll < 0.345:
            self.features.add("bare-input")
            return 'object.get(input, "tenant", null)', "any", []
        if roll < 0.38:
            return self.member_value()
        ref, kind = self.input_ref()
        return ref, kind, []

    def library_value(self, depth: int) -> tuple[Rego, str, list[str]]:
        rng = self.rng
        package = rng.choice(self.libraries)
        name = package.rsplit(".", 1)[-1]
        if package in self.imported_libs:
            prefix = self.imported_libs[package]
            self.features.add("import-data")
        elif rng.random() < 0.15:
            # A computed root below data.
            key = self.fresh("lk")
            self.features.add("computed-data-root")
            choice = rng.choice(["r_any", "r_labels"])
            return (f"data.gen.lib[{key}].{choice}", "any", [f'{key} := concat("", ["{name[0]}", "{name[1:]}"])'])
        else:
            prefix = f"data.{package}"
        self.features.add("library")
        if rng.random() < 0.5:
            inner, _, pre = self.value(depth + 1)
            return f"{prefix}.{rng.choice(['f_norm', 'f_keys', 'f_whole'])}({inner})", "any", pre
        return f"{prefix}.{rng.choice(['r_any', 'r_labels', 'r_images'])}", "any", []

    # -- conditions ---------------------------------------------------------------------------------

    def condition(self) -> list[str]:
        """Body statements that hold or not depending on the input."""
        rng = self.rng
        if rng.random() < 0.4:
            return self.member_condition()
        value, _, pre = self.value()
        lit = json.dumps(rng.choice(STRINGS))
        template = rng.randrange(26)
        if template in (21, 22) and rng.random() < 0.93:
            template = 0  # the whole input turns the projection off: rare, so that most sets are projected
        out: list[str] = list(pre)
        guard = _GUARDS.get(template)
        if guard is not None and rng.random() < 0.85:
            # Most of the time the value is bound and its type checked first, so that the built-in does
            # not fail; the rest of the time it may (a failure is an answer too, compared as such).
            bound = self.fresh("t")
            out += [f"{bound} := {value}", guard.format(bound)]
            value = bound
        if template == 0:
            out.append(f"{value} == {lit}")
        elif template == 1:
            out.append(f"{value} != {lit}")
        elif template == 2:
            out.append(f"count({value}) > {rng.choice([0, 1, 2])}")
        elif template == 3:
            out.append(f'startswith({value}, "{rng.choice(PREFIXES)}")')
        elif template == 4:
            self.features.add("not")
            out.append(f"not {value}")
        elif template == 5:
            out.append(value)
        elif template == 6:
            self.features.add("object.get")
            out.append(f'object.get({value}, "{rng.choice(KEYS)}", "dflt") == "dflt"')
        elif template == 7:
            k, v = self.fresh("k"), self.fresh("v")
            self.features.add("some-k-v")
            out += [f"some {k}, {v} in {value}", f"is_string({k})", f'startswith({k}, "{rng.choice(PREFIXES)}")']
        elif template == 8:
            x = self.fresh("x")
            self.features.add("some-in")
            out += [f"some {x} in {value}", rng.choice([f"{x}.name == {lit}", f"{x} == {lit}",
                                                        f'startswith({x}.image, "{rng.choice(PREFIXES)}")'])]
            if out[-1].startswith("startswith") and rng.random() < 0.85:
                out.insert(-1, f"is_string({x}.image)")
        elif template == 9:
            x = self.fresh("x")
            self.features.add("every")
            out.append(f"every {x} in {value} {{ {x} != {lit} }}")
        elif template == 10:
            left, right = rng.choice(self.gen.usable(WHOLE_PAIRS, pairs=True))
            self.features.add("whole-compare")
            out.append(f"json.marshal({left}) == json.marshal({right})" if rng.random() < 0.5
                       else f"{left} == {right}")
        elif template == 11:
            p, v = self.fresh("p"), self.fresh("w")
            self.features.add("walk")
            out += [f"walk({value}, [{p}, {v}])", f"{v} == {lit}"]
        elif template == 12:
            x = self.fresh("x")
            self.features.add("comprehension")
            out.append(f"count([{x} | some {x} in {value}; {x} != null]) > {rng.choice([0, 1])}")
        elif template == 13:
            k, s = self.fresh("k"), self.fresh("s")
            self.features.add("comprehension")
            out += [f"{s} := {{{k} | some {k}, _ in {value}}}", f'"{rng.choice(KEYS)}" in {s}']
        elif template == 14:
            k, v, o = self.fresh("k"), self.fresh("v"), self.fresh("o")
            self.features.add("comprehension")
            out += [f"{o} := {{{k}: {v} | some {k}, {v} in {value}; is_string({v})}}", f"count({o}) >= 1"]
        elif template == 15:
            out.append(rng.choice([f"is_object({value})", f'type_name({value}) == "string"', f"is_array({value})"]))
        elif template == 16 and self.functions:
            out.append(f"{rng.choice(self.functions)}({value}) == {lit}")
        elif template == 17:
            out.append(f'{value}["{rng.choice(KEYS)}"] == {lit}')
        elif template == 18:
            out.append(f"{value} in {{{lit}, \"bad\", \"a\"}}")
        elif template == 19:
            out.append(f'regex.match("^{rng.choice(["b", "a", "nv"])}", {value})')
        elif template == 20:
            left, right = rng.choice(self.gen.usable(WHOLE_PAIRS, pairs=True))
            out.append(f"count({left}) == count({right})")
        elif template == 21:
            self.features.add("bare-input")
            out.append(rng.choice([f"{self.bare_function()}(input)", "count(input) > 5",
                                   'json.marshal(input) != ""']))
        elif template == 22:
            self.features.add("bare-input")
            p, v = self.fresh("p"), self.fresh("w")
            out += [f"walk(input, [{p}, {v}])", f"{v} == {lit}"]
        elif template == 23:
            self.features.add("not")
            inner = self.condition()
            if len(inner) == 1 and not inner[0].startswith("not "):
                out.append(f"not {inner[0]}")
            else:
                out.append(f"{value} == {lit}")
        elif template == 24:
            out.append(f"{value} == {value}")
        else:
            out.append(f"{value} == {lit}")
        return out

    def bare_function(self) -> str:
        """A function of this module that takes the whole input."""
        name = "whole_input"
        if name not in self.functions and not any(r.startswith(f"{name}(") for r in self.rules):
            self.rules.append(f'{name}(doc) if {{\n\tdoc.request.object.metadata.name == "bad"\n}}\n')
        return name

    # -- member flows -------------------------------------------------------------------------------
    # Reads into the members of a collection: what `some c in X; c.image` reaches is every member's
    # image, not the whole of X, if the analysis follows `c`. Everything here is built so that cutting a
    # member field that is read changes an answer on some input (the inputs vary members field by field).

    def collection(self) -> tuple[Rego, str]:
        """A collection a condition iterates, and the kind of its members: an input collection (directly,
        through `import ... as pod` or an alias), a collection rule of this module, or one of a library
        (through its import or a `data.` reference)."""
        rng = self.rng
        roll = rng.random()
        usable = [p for p in self.libraries if p in self.gen.lib_collections]
        if roll < 0.2 and usable:
            package = rng.choice(usable)
            if package in self.imported_libs:
                prefix = self.imported_libs[package]
                self.features.add("collection-import")
            else:
                prefix = f"data.{package}"
                self.features.add("collection-data-ref")
            name = rng.choice(["containers", "gpu_containers", "gpu_containers", "pod_containers", "container_set"])
            if name == "container_set":
                self.features.add("member-set-rule")
            return f"{prefix}.{name}", "container"
        if roll < 0.45:
            if not self.collections or (len(self.collections) < 2 and rng.random() < 0.5):
                self.collection_rule()
            return rng.choice(self.collections)
        if roll < 0.55 and self.pod_alias:
            self.features.add("import-alias")
            return rng.choice(["pod.spec.containers", "pod.spec.initContainers"]), "container"
        pods = [(a, t) for a, t in self.alias_targets.items()
                if t in ("input.request.object", "input.request.object.spec", "input.request.oldObject")]
        if roll < 0.62 and pods:
            alias, target = rng.choice(pods)
            self.features.add("alias")
            return (f"{alias}.containers" if target.endswith(".spec") else f"{alias}.spec.containers"), "container"
        return rng.choice(INPUT_COLLECTIONS)

    def collection_rule(self) -> None:
        """A rule defined once, without a body, whose value is a collection: an input collection, an
        `object.get` of one, an `array.concat` of such, an array comprehension keeping some members whole,
        or (not to be narrowed: a set dedups whole members) a set comprehension of members."""
        rng = self.rng
        if not any(k == "container" for _, k in self.collections) and rng.random() < 0.7:
            self.collection_rule()  # one to build on: the next one may concatenate or filter it
        taken = {n for n, _ in self.collections}
        name = "containers" if self.main and "containers" not in taken else self.fresh("cs")
        pod = "pod" if self.pod_alias and rng.random() < 0.5 else "input.request.object"
        containers = [n for n, k in self.collections if k == "container"]
        roll = rng.random() if containers else rng.random() * 0.3
        kind = "container"
        if roll < 0.1:
            value, kind = rng.choice(INPUT_COLLECTIONS)
            self.features.add("collection-rule")
        elif roll < 0.3:
            field_name = rng.choice(["containers", "containers", "initContainers", "ephemeralContainers"])
            value = rng.choice([f'object.get({pod}.spec, "{field_name}", [])',
                                f'object.get({pod}, ["spec", "{field_name}"], [])'])
            self.features.add("collection-object-get")
        elif roll < 0.5:
            parts = [rng.choice([*containers, f'object.get({pod}.spec, "{f}", [])'])
                     for f in rng.sample(["containers", "initContainers", "ephemeralContainers"], 2)]
            value = f"array.concat({parts[0]}, {parts[1]})"
            if rng.random() < 0.3:
                value = f'array.concat({value}, object.get({pod}.spec, "ephemeralContainers", []))'
            self.features.add("collection-concat")
        elif roll < 0.85:
            source = rng.choice(containers)
            value = f"[c | some c in {source}; {'; '.join(self.member_read('c', 'container'))}]"
            self.features.add("collection-filter")
        else:
            value = f"{{c | some c in {rng.choice(containers)}}}"
            self.features.add("member-set-rule")
        self.rules.append(f"{name} := {value}\n")
        self.collections.append((name, kind))

    def member_function(self, style: str) -> str:
        """This module's function of a member in `style` (written on first use): `multi` (several
        definitions), `else` (an else chain calling `multi`), `part` (returns part of its argument),
        `calls` (calls `multi` with its parameter), `whole` (its parameter whole in its value), `input`
        (compares its parameter with the input), `iter` (iterates its parameter, a collection)."""
        if style in self.member_functions:
            return self.member_functions[style]
        name = self.fresh(f"m_{style}_")
        self.member_functions[style] = name
        self.features.add(f"member-function-{style}")
        if style == "multi":
            self.rules += [
                f'{name}(c) if c.resources.limits["nvidia.com/gpu"]\n',
                f'{name}(c) if c.resources.limits["amd.com/gpu"]\n',
                f"{name}(c) if {{\n\tis_object(c.resources.limits)\n\tsome key, _ in c.resources.limits\n"
                '\tstartswith(key, "nvidia.com/mig-")\n}\n',
            ]
        elif style == "else":
            multi = self.member_function("multi")
            self.rules.append(f'{name}(c) := "gpu" if {{\n\t{multi}(c)\n}} else := "priv" if {{\n'
                              '\tc.securityContext.privileged == true\n} else := "cpu"\n')
        elif style == "part":
            self.rules.append(f"{name}(c) := c.resources\n")
        elif style == "calls":
            multi = self.member_function("multi")
            self.rules.append(f'{name}(c) if {{\n\tnot {multi}(c)\n\tis_string(c.image)\n'
                              '\tstartswith(c.image, "nvcr.io/")\n}\n')
        elif style == "whole":
            self.rules.append(f"{name}(c) := [c.name, c]\n")
        elif style == "input":
            self.rules.append(f"{name}(c) if c.name == input.request.object.metadata.labels.app\n")
        else:
            self.rules.append(f"{name}(cs) if {{\n\tsome c in cs\n\tc.securityContext.privileged == true\n}}\n")
        return name

    def member_call(self, c: str) -> list[str]:
        """Statements passing member `c` to a function: of this module, or of a library."""
        rng = self.rng
        usable = [p for p in self.libraries if p in self.gen.lib_collections]
        if usable and rng.random() < 0.3:
            package = rng.choice(usable)
            prefix = self.imported_libs.get(package, f"data.{package}")
            self.features.add("member-library-function")
            return [rng.choice([f"{prefix}.is_gpu_container({c})", f'{prefix}.limits_of({c})["nvidia.com/gpu"] == "1"',
                                f"not {prefix}.is_gpu_container({c})"])]
        style = rng.choice(["multi", "multi", "else", "part", "calls", "whole", "input"])
        name = self.member_function(style)
        if style == "else":
            return [f'{name}({c}) == "{rng.choice(["gpu", "priv", "cpu"])}"']
        if style == "part":
            return [f'{name}({c}).limits["nvidia.com/gpu"] == "1"']
        if style == "whole":
            pair = self.fresh("pair")
            return [f"{pair} := {name}({c})", rng.choice([
                f"{pair}[1] == input.request.oldObject.spec.containers[0]", f"count({pair}[1]) > 3",
                f'{pair}[0] == "main"', f'json.marshal({pair}) != "[]"'])]
        return [rng.choice([f"{name}({c})", f"not {name}({c})"])]

    def member_read(self, c: str, kind: str, depth: int = 0) -> list[str]:
        """Statements reading member `c` of the given kind: a field, a function of it, its own members."""
        rng = self.rng
        lit = json.dumps(rng.choice(STRINGS))
        roll = rng.random()
        if kind == "container" and depth == 0:
            if roll < 0.3:
                return self.member_call(c)
            if roll < 0.4:
                e = self.fresh("e")
                self.features.add("member-nested")
                guard = [f"is_array({c}.env)"] if rng.random() < 0.7 else []
                return [*guard, f"some {e} in {c}.env", *self.member_read(e, "env", depth + 1)]
            if roll < 0.45:
                k, v = self.fresh("k"), self.fresh("v")
                self.features.add("member-object-values")
                return [f"is_object({c}.resources)", f"some {k}, {v} in {c}.resources",
                        f'{v}["nvidia.com/gpu"] == "1"']
            if roll < 0.5:
                return [f"is_string({c}.image)", f'startswith({c}.image, "{rng.choice(PREFIXES)}")']
        if kind == "str" and roll < 0.3:
            return [f"is_string({c})", f'startswith({c}, "{rng.choice(PREFIXES)}")']
        read = rng.choice(MEMBER_READS[kind]).format(c=c, lit=lit, image=self.gen.wanted("image"),
                                                     name=self.gen.wanted("name"))
        if rng.random() < 0.1:
            self.features.add("not")
            return [f"not {read}"]
        return [read]

    def member_condition(self) -> list[str]:
        """Body statements that iterate, index, count or pass along the members of a collection."""
        rng = self.rng
        coll, kind = self.collection()
        c = self.fresh("c")
        lit = json.dumps(rng.choice(STRINGS))
        image_lit, name_lit = self.gen.wanted("image"), self.gen.wanted("name")
        # Iterating a string fails the query: most of the time the collection's type is checked first.
        out = [rng.choice([f"is_array({coll})", _COLLECTION.format(coll), f"count({coll}) >= 0"])
               ] if rng.random() < 0.25 else []
        template = rng.randrange(22)
        container = kind == "container"
        if template <= 3:
            self.features.add("member-some")
            out += [f"some {c} in {coll}", *self.member_read(c, kind)]
        elif template == 4:
            k = self.fresh("k")
            self.features.add("member-some-k-v")
            out += [f"some {k}, {c} in {coll}", *self.member_read(c, kind),
                    rng.choice([f"{k} != 0", f'{k} != "app"', "true"])]
        elif template == 5:
            self.features.add("member-every")
            out.append(f"every {c} in {coll} {{ {'; '.join(self.member_read(c, kind))} }}")
        elif template == 6:
            self.features.add("member-comprehension")
            field_name = rng.choice(["image", "name"]) if container else None
            if field_name is None or rng.random() < 0.5:
                out.append(f"count([{c} | some {c} in {coll}; {'; '.join(self.member_read(c, kind))}]) > "
                           f"{rng.choice([0, 1])}")
            elif rng.random() < 0.5:
                values = self.fresh("vs")
                wanted = image_lit if field_name == "image" else name_lit
                out += [f"{values} := [{c}.{field_name} | some {c} in {coll}]", f"{wanted} in {values}"]
            else:
                values = self.fresh("vs")
                out += [f"{values} := {{{c}.name: {c}.image | some {c} in {coll}; is_string({c}.name)}}",
                        f"count({values}) > 1"]
        elif template == 7:
            # A set of whole members: duplicates that differ only in an unread field are two members.
            self.features.add("member-set-count")
            reads = "; ".join(self.member_read(c, kind))
            out.append(rng.choice([f"count({{{c} | some {c} in {coll}}}) > 1",
                                   f"count({{{c} | some {c} in {coll}}}) == count({coll})",
                                   f"count({{{c} | some {c} in {coll}; {reads}}}) == 1"]))
        elif template == 8 and container:
            values = self.fresh("vs")
            self.features.add("member-set-field")
            out += [f"{values} := {{{c}.image | some {c} in {coll}}}", f"{image_lit} in {values}"]
        elif template == 9 and container:
            i = self.fresh("i")
            self.features.add("member-index")
            out += [f"some {i}", f"{coll}[{i}].image == {image_lit}"]
            if rng.random() < 0.5:
                out.append(f'{coll}[{i}].resources.limits["nvidia.com/gpu"] == "1"')
        elif template == 10 and container:
            self.features.add("member-wildcard")
            out.append(rng.choice([f"{coll}[_].name == {name_lit}", f"{coll}[_].env[_].value == {lit}",
                                   f'{coll}[_].resources.limits["nvidia.com/gpu"] == "1"']))
        elif template == 11 and container:
            self.features.add("member-constant-index")
            out.append(rng.choice([f"{coll}[0].image == {image_lit}", f"{coll}[1].securityContext.privileged == true",
                                   f"{coll}[0].env[0].name == \"A\""]))
        elif template == 12:
            self.features.add("member-count")
            out.append(rng.choice([f"count({coll}) > {rng.choice([0, 1, 2])}", f"count({coll}) == 2"]))
        elif template == 13:
            a, b = self.fresh("a"), self.fresh("b")
            self.features.add("member-destructure")
            if container and rng.random() < 0.5:
                out += [f"some [{a}, {b}] in [[{c}.name, {c}.image] | some {c} in {coll}]", f"{b} == {image_lit}"]
            else:
                out += [f"some [{a}, {b}] in {coll}", f"{a} == {name_lit}"]
        elif template == 14 and container:
            self.features.add("member-unify")
            n, img = self.fresh("n"), self.fresh("img")
            out += [f"some {c} in {coll}", rng.choice([
                f"{c} = input.request.oldObject.spec.containers[0]",
                f"{c} == input.request.oldObject.spec.containers[_]",
                f'{{"name": {n}, "image": {img}}} = {c}',
            ])]
        elif template == 15:
            self.features.add("member-whole-builtin")
            p, v = self.fresh("p"), self.fresh("w")
            out += [f"some {c} in {coll}", *rng.choice([
                [f'contains(json.marshal({c}), "{rng.choice(["bad", "env", "A", "ports"])}")'],
                [f"walk({c}, [{p}, {v}])", f"{v} == {lit}"],
                [f"is_object({c})", f'"{rng.choice(["env", "ports", "args", "workingDir"])}" in object.keys({c})'],
                [f"is_object({c})", f"count({c}) > 3"],
                [f'sprintf("%v", [{c}]) != ""', f"{c} != null"],
                [f"{c} in {{{lit}, \"main\", {{\"name\": \"main\", \"image\": \"a\"}}}}"],
            ])]
        elif template == 16:
            d = self.fresh("d")
            self.features.add("member-rebind")
            if container and rng.random() < 0.5:
                # The inner `c` of `every` shadows the outer one: it is an env entry, not a container.
                out += [f"some {c} in {coll}", f"is_object({c})", f"every {c} in object.get({c}, \"env\", []) "
                        f"{{ {c}.name != {name_lit} }}"]
            else:
                out += [f"some {c} in {coll}", f"{d} := {c}", *self.member_read(d, kind)]
        elif template == 17 and self.collections:
            # A local variable shadowing a collection rule's name holds another collection (declared in a
            # comprehension: its own scope, whatever the rest of the body does with the rule).
            shadowed, _ = rng.choice(self.collections)
            other, other_kind = rng.choice(INPUT_COLLECTIONS)
            self.features.add("member-shadow")
            out.append(f"count([{c} | {shadowed} := {other}; some {c} in {shadowed}; "
                       f"{'; '.join(self.member_read(c, other_kind))}]) > 0")
        elif template == 18 and container:
            usable = [p for p in self.libraries if p in self.gen.lib_collections]
            if usable and rng.random() < 0.4:
                package = rng.choice(usable)
                prefix = self.imported_libs.get(package, f"data.{package}")
                self.features.add("member-library-function")
                out.append(rng.choice([f"{prefix}.any_privileged({coll})", f"not {prefix}.is_gpu_pod"]))
            else:
                iterating = self.member_function("iter")
                out.append(rng.choice([f"{iterating}({coll})", f"not {iterating}({coll})"]))
        elif template == 19:
            k, v = self.fresh("k"), self.fresh("v")
            self.features.add("member-object-values")
            target = rng.choice(["input.request.object.metadata.labels", "input.request.object.spec.nodeSelector",
                                 "input.request.object.metadata.annotations"])
            out = [f"is_object({target})", f"some {k}, {v} in {target}",
                   rng.choice([f"{v} == {lit}", f'{v}.nested == {lit}', f'startswith({k}, "kgwe.io/")'])]
        else:
            self.features.add("member-some")
            out += [f"some {c} in {coll}", *self.member_read(c, kind)]
        return out

    def member_value(self) -> tuple[Rego, str, list[str]]:
        """A value made of members: their count, a field of each, or a set of the members themselves."""
        rng = self.rng
        coll, kind = self.collection()
        c = self.fresh("c")
        self.features.add("member-value")
        if kind == "container":
            return rng.choice([(f"[{c}.image | some {c} in {coll}]", "arr", []), (f"count({coll})", "num", []),
                               (f"{{{c} | some {c} in {coll}}}", "arr", []),
                               (f"{{{c}.name | some {c} in {coll}}}", "arr", [])])
        return f"[{c} | some {c} in {coll}]", "arr", []

    # -- rules ----------------------------------------------------------------------------------------

    def body(self, conditions: int) -> list[str]:
        out: list[str] = []
        for _ in range(conditions):
            out += self.condition()
        return out

    def helper_rule(self) -> None:
        rng = self.rng
        if rng.random() < 0.25:
            # An alias, of the input or of another alias.
            name = self.fresh("a")
            targets = [r for r, kind in self.gen.usable(INPUT_REFS) if kind == "obj" and "[" not in r]
            target = rng.choice([*targets, *(f"{a}.metadata" for a in self.aliases)])
            self.rules.append(f"{name} := {target}\n")
            self.aliases.append(name)
            root = target.split(".", 1)[0]
            self.alias_targets[name] = (self.alias_targets[root] + target[len(root):] if root in self.alias_targets
                                        else target)
            self.features.add("alias")
            return
        name = self.fresh("h")
        value, _, pre = self.value()
        if rng.random() < 0.4:
            self.features.add("default")
            self.rules.append(f'default {name} := "none"\n')
        if rng.random() < 0.04:
            # A rule whose body rewrites the input: the projection is off for the whole set.
            self.features.add("with")
            target, _ = rng.choice(INPUT_REFS[:20])
            if "[_]" in target or "[0]" in target:
                target = "input.request.operation"
            replacement = json.dumps(rng.choice(STRINGS))
            if rng.random() < 0.3:
                # The members themselves replaced.
                self.features.add("member-with")
                target = "input.request.object.spec.containers"
                replacement = '[{"name": "bad", "image": "bad"}, "main"]'
            body = [*pre, f"v := {value} with {target} as {replacement}"]
            self.rules.append(f"{name} := v if {{\n\t" + "\n\t".join(body) + "\n}\n")
        else:
            body = [*pre, f"v := {value}"]
            if rng.random() < 0.5:
                body = self.body(1) + body
            self.rules.append(f"{name} := v if {{\n\t" + "\n\t".join(body) + "\n}\n")
        self.helpers.append(name)

    def helper_function(self) -> None:
        rng = self.rng
        name = self.fresh("f")
        self.features.add("else")
        lit = json.dumps(rng.choice(STRINGS))
        branches = [
            f"{name}(x) := \"bad\" if {{\n\tx == {lit}\n}}",
            f'else := "prefixed" if {{\n\tis_string(x)\n\tstartswith(x, "{rng.choice(PREFIXES)}")\n}}',
        ]
        if rng.random() < 0.5:
            ref, _ = rng.choice([r for r in INPUT_REFS if r[1] == "str" and "[_]" not in r[0]])
            self.features.add("input-in-function")
            branches.append(f"else := {ref} if {{\n\tis_object(x)\n}}")
        branches.append('else := "other"')
        self.rules.append(" ".join(branches) + "\n")
        self.functions.append(name)

    def gathered_rule(self, kind: str) -> None:
        rng = self.rng
        if self.gen.member_focus and rng.random() < 0.5:
            conditions = self.member_condition()  # alone: its answer is the rule's
        else:
            conditions = self.body(rng.choice([1, 1, 1, 2]))
        tag = f"{self.package} {kind} {self.fresh('r')}"
        roll = rng.random()
        if roll < 0.2:
            # The head itself reads the input.
            value, _, pre = self.value()
            self.features.add("head-reads-input")
            self.rules.append(f"{kind} contains {value} if {{\n\t" + "\n\t".join([*pre, *conditions]) + "\n}\n")
            return
        if 0.3 <= roll < 0.38:
            # The head reads a field of the member the body iterates.
            coll, member = self.collection()
            c = self.fresh("c")
            self.features.add("member-head")
            field_name = {"container": rng.choice([".name", ".image"]), "env": ".value",
                          "toleration": ".key"}.get(member, "")
            self.rules.append(f'{kind} contains sprintf("%v: %v", [{json.dumps(tag)}, {c}{field_name}]) if {{\n\t'
                              + "\n\t".join([f"some {c} in {coll}", *self.member_read(c, member), *conditions])
                              + "\n}\n")
            return
        if roll < 0.3:
            self.features.add("head-reads-input")
            ref = rng.choice(["input.request.object.metadata.name", 'input.request.object.metadata.labels["kgwe.io/x"]',
                              "input.intent.profile", "input.tenant"])
            self.rules.append(f'{kind} contains sprintf("%v: %v", [{json.dumps(tag)}, {ref}]) if {{\n\t'
                              + "\n\t".join(conditions) + "\n}\n")
            return
        if rng.random() < 0.5:
            value, _, pre = self.value()
            statements = [*conditions, *pre, f'msg := sprintf("%v %v", [{json.dumps(tag)}, {value}])']
        else:
            statements = [*conditions, f"msg := {json.dumps(tag)}"]
        self.rules.append(f"{kind} contains msg if {{\n\t" + "\n\t".join(statements) + "\n}\n")

    def decision_rule(self) -> None:
        """A placement decision read from the input (a complete rule: two values fail the query)."""
        value, _, pre = self.value()
        self.features.add("decision")
        body = [*self.body(1), *pre, f"v := {value}"]
        self.rules.append('decision := {"profile": v} if {\n\t' + "\n\t".join(body) + "\n}\n")

    def source(self) -> str:
        header = [f"package {self.package}", "", "import rego.v1"]
        return "\n".join([*header, *self.imports, "", *self.rules])


class RegoGenerator:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.lib_collections: set[str] = set()  # library packages holding the collection rules
        self.member_focus = False  # this set reads no container collection whole but through its members
        # Member field values the set's policies compare with: the inputs draw them more often, so that
        # a member's field decides a rule's answer about as often as not.
        self.compared: dict[str, list[str]] = {"image": [], "name": []}

    def wanted(self, field_name: str) -> Rego:
        """A value a policy compares a member's `field_name` with (remembered for the inputs), as Rego."""
        value = self.rng.choice(IMAGES if field_name == "image" else NAMES)
        if value not in self.compared[field_name]:
            self.compared[field_name].append(value)
        return json.dumps(value)

    def _member_value(self, field_name: str) -> str:
        pool = self.compared[field_name]
        if pool and self.rng.random() < 0.5:
            return self.rng.choice(pool)
        return self.rng.choice(IMAGES if field_name == "image" else NAMES)

    def usable(self, refs: list[tuple[Rego, str]], pairs: bool = False) -> list[tuple[Rego, str]]:
        """`refs` ((reference, kind), or with `pairs` two references) without those that read container
        members whole, in a member-focused set."""
        if not self.member_focus:
            return refs
        return [item for item in refs if not any(whole_members(r) for r in (item if pairs else item[:1]))]

    # -- policy sets ------------------------------------------------------------------------------------

    def library(self, package: str) -> str:
        """A library package: rules that read the input and one-argument functions (some take the whole
        input or read it themselves)."""
        rng = self.rng
        rules = [
            f"r_any := {rng.choice([r for r, _ in self.usable(INPUT_REFS) if '[_]' not in r])}",
            "r_labels := object.get(input.request.object.metadata, \"labels\", {})",
            "r_images := {c.image | some c in input.request.object.spec.containers}",
            "f_norm(x) := lower(x) if { is_string(x) } else := x",
            "f_keys(x) := {k | some k, _ in x} if { is_object(x) } else := set()",
            f"f_whole(x) := {rng.choice(['x', 'input.intent', 'json.marshal(x)'])} if {{ x != null }} else := null",
        ]
        if rng.random() < 0.3 and not self.member_focus:
            rules.append("r_pod := input.request.object")
        if rng.random() < 0.8:
            rules += self.library_collections()
            self.lib_collections.add(package)
        return f"package {package}\n\nimport rego.v1\n\n" + "\n\n".join(rules) + "\n"

    def library_collections(self) -> list[str]:
        """Collection rules and functions of a member, as rego/lib/pod.rego writes them: every container
        (an `array.concat` of `object.get`s through an alias), the GPU ones (an array comprehension
        keeping members whole), an input collection as is, a set of whole members, a function defined
        three times, one returning part of its argument, one iterating its argument."""
        rng = self.rng
        spec = rng.choice(["pod.spec", "input.request.object.spec"])
        containers = rng.choice([
            f'array.concat(\n\tarray.concat(object.get({spec}, "containers", []), '
            f'object.get({spec}, "initContainers", [])),\n\tobject.get({spec}, "ephemeralContainers", []),\n)',
            f'array.concat(object.get({spec}, "containers", []), object.get({spec}, "initContainers", []))',
            f'object.get({spec}, "containers", [])',
        ])
        return [
            "pod := input.request.object",
            f"containers := {containers}",
            'is_gpu_container(c) if c.resources.limits["nvidia.com/gpu"]',
            'is_gpu_container(c) if c.resources.limits["amd.com/gpu"]',
            'is_gpu_container(c) if {\n\tsome name, _ in c.resources.limits\n\tstartswith(name, "nvidia.com/mig-")\n}',
            "gpu_containers := [c | some c in containers; is_gpu_container(c)]",
            f"pod_containers := {rng.choice(['input.request.object.spec.containers', 'pod.spec.containers'])}",
            "container_set := {c | some c in containers}",
            "limits_of(c) := c.resources.limits",
            "any_privileged(cs) if {\n\tsome c in cs\n\tc.securityContext.privileged == true\n}",
            "is_gpu_pod if count(gpu_containers) > 0",
        ]

    def policy_set(self) -> GeneratedSet:
        rng = self.rng
        # Half the sets read no container collection whole outside their member flows, so that an analysis
        # narrowing the members has room to cut (and to cut too much); the rest mix everything.
        self.member_focus = rng.random() < 0.5
        n_libraries = rng.choice([0, 1, 1, 2])
        n_policies = rng.choice([1, 2, 2, 3])
        lib_packages = [f"gen.lib.l{j}" for j in range(n_libraries)]
        units: dict[str, dict[str, str]] = {}
        for package in lib_packages:
            units[package] = {f"directory:{package}.rego": self.library(package)}
        packages: dict[str, str] = {}
        rules: dict[str, frozenset[str]] = {}
        features: set[str] = set()
        policy_packages = [f"gen.p{i}" for i in range(n_policies)]
        for i, package in enumerate(policy_packages):
            others = policy_packages[:i]  # earlier ones only: no recursion
            split = rng.random() < 0.2
            files: list[_Module] = [_Module(self, package, lib_packages, others)]
            if split:
                features.add("split-package")
                # Numbered from 100: its helpers' names differ from the first file's.
                files.append(_Module(self, package, lib_packages, others, numbered_from=100))
            main = files[0]
            if rng.random() < 0.3:
                main.imports.append("import input.request.object as pod")
                main.pod_alias = True
            if rng.random() < 0.03:
                main.imports.append("import input")
                features.add("import-input")
            for library in lib_packages:
                if rng.random() < 0.3:
                    main.imports.append(f"import data.{library}")
                    main.imported_libs[library] = library.rsplit(".", 1)[-1]
            for module in files:
                for _ in range(rng.choice([0, 1, 2])):
                    module.helper_rule()
                if rng.random() < 0.5:
                    module.helper_function()
            kinds = {"deny"} if rng.random() < 0.6 else {"deny", "warn"}
            for kind in sorted(kinds):
                for _ in range(rng.choice([1, 1, 2])):
                    rng.choice(files).gathered_rule(kind)
            if rng.random() < 0.2:
                kinds.add("decision")
                main.decision_rule()
            if split:
                # The second file's helpers are read by the first one through the package.
                for helper in files[1].helpers:
                    main.helpers.append(f"data.{package}.{helper}")
                if files[1].helpers and rng.random() < 0.7:
                    main.gathered_rule("deny")
            name = package
            units[name] = {f"directory:{package.replace('.', '/')}/{k}.rego": m.source() for k, m in enumerate(files)}
            packages[name] = package
            rules[name] = frozenset(kinds | ({"deny"} if split else set()))
            for module in files:
                features |= module.features
        skipped = frozenset(u for u in packages if rng.random() < 0.25)
        if skipped:
            features.add("skipped")
        return GeneratedSet(units, frozenset(lib_packages), packages, rules, skipped, features)

    # -- inputs -----------------------------------------------------------------------------------------

    def _maybe(self, value: Any, p: float = 0.8) -> Any:
        return value if self.rng.random() < p else _ABSENT

    def _odd(self, value: Any) -> Any:
        """Now and then another type in the place of `value`."""
        rng = self.rng
        if rng.random() < 0.9:
            return value
        return rng.choice([None, 7, "str", [], {}, True, [value], {"nested": value}])

    def _labels(self) -> Any:
        rng = self.rng
        labels: dict[str, Any] = {}
        for key in rng.sample(KEYS, rng.randrange(0, 4)):
            # A value is now and then a key too, for the refs whose index is read from the input.
            labels[key] = self._odd(rng.choice(STRINGS if rng.random() < 0.7 else KEYS))
        return self._odd(labels)

    def _env(self) -> Any:
        rng = self.rng
        if rng.random() < 0.15:
            return rng.choice([{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, "A=1", None])
        return {"name": rng.choice(["A", "A", "B", "bad"]), "value": self._odd(rng.choice(STRINGS))}

    def _container(self) -> Any:
        rng = self.rng
        if rng.random() < 0.07:
            # Not an object: a member policies index, destructure or compare whole.
            return rng.choice(["main", 3, None, ["main", "nvcr.io/cuda:12"], ["bad", "a"], [], {}])
        limits: dict[str, Any] = {}
        if rng.random() < 0.6:
            limits["nvidia.com/gpu"] = self._odd(rng.choice(["1", "2", 1]))
        for key in rng.sample(["amd.com/gpu", "nvidia.com/mig-1g.10gb", "cpu"], rng.choice([0, 0, 1, 2])):
            limits[key] = rng.choice(["1", "2"])
        resources: dict[str, Any] = {"limits": self._odd(limits)}
        if rng.random() < 0.3:
            resources["requests"] = {"cpu": "1", **({"nvidia.com/gpu": "1"} if rng.random() < 0.5 else {})}
        container = {
            "name": self._odd(self._member_value("name")),
            "image": self._odd(self._member_value("image")),
            "resources": self._maybe(self._odd(resources)),
            "securityContext": self._maybe({"privileged": self._odd(rng.random() < 0.3)}, 0.5),
            "env": self._maybe(self._odd([self._env() for _ in range(rng.randrange(0, 3))]), 0.5),
            "ports": self._maybe([{"containerPort": rng.choice([80, 8080, "80"]), "name": "http"}], 0.3),
            "workingDir": self._maybe(rng.choice(["/w", "/x"]), 0.3),
            "args": self._maybe([rng.choice(STRINGS)], 0.3),
        }
        return _present(container)

    def _containers(self, most: int = 3) -> Any:
        """Containers that differ field by field, now and then with a member that is no object, and a twin:
        a copy of a member that differs from it in one field only (or in none), which a set of whole members
        keeps apart (or together) and a set of one field does not."""
        rng = self.rng
        members = [self._container() for _ in range(rng.randrange(0, most + 1))]
        if members and rng.random() < 0.35:
            twin = copy.deepcopy(rng.choice(members))
            if isinstance(twin, dict) and rng.random() < 0.8:
                changed = rng.choice(["workingDir", "args", "env", "ports", "name", "image", "resources",
                                      "securityContext"])
                if changed in twin and rng.random() < 0.4:
                    del twin[changed]
                else:
                    twin[changed] = {"workingDir": "/twin", "args": ["--twin"], "env": [{"name": "B", "value": "twin"}],
                                     "ports": [{"containerPort": 9090}], "name": "twin", "image": "twin/image",
                                     "resources": {"limits": {"cpu": "1"}},
                                     "securityContext": {"privileged": True}}[changed]
            members.insert(rng.randrange(len(members) + 1), twin)
        return self._odd(members)

    def _pod(self) -> Any:
        rng = self.rng
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": self._odd(_present({
                "name": self._maybe(self._odd(rng.choice(["train-0", "bad", "a", "x"]))),
                "namespace": self._maybe(rng.choice(["default", "team-a", "bad"])),
                "uid": self._maybe("uid-" + str(rng.randrange(100))),
                "labels": self._maybe(self._labels()),
                "annotations": self._maybe(self._labels(), 0.6),
            })),
            "spec": self._odd(_present({
                "containers": self._maybe(self._containers(), 0.93),
                "initContainers": self._maybe(self._containers(2), 0.35),
                "ephemeralContainers": self._maybe(self._containers(1), 0.15),
                "nodeSelector": self._maybe(self._labels(), 0.4),
                "runtimeClassName": self._maybe(self._odd("nvidia"), 0.3),
                "hostNetwork": self._maybe(self._odd(rng.random() < 0.3), 0.3),
                "tolerations": self._maybe([{"key": rng.choice(["nvidia.com/gpu", "x"]), "operator": "Exists",
                                             "effect": rng.choice(["NoSchedule", "NoExecute"])}
                                            for _ in range(rng.randrange(0, 3))], 0.4),
            })),
        }
        return self._odd(pod)

    def _near(self, pod: Any) -> Any:
        """`pod` again with one container changed in one field, or unchanged: an update whose old object
        the policies compare with the new one member by member."""
        if not isinstance(pod, dict):
            return pod
        near = copy.deepcopy(pod)
        containers = near["spec"].get("containers") if isinstance(near.get("spec"), dict) else None
        if isinstance(containers, list) and containers and isinstance(containers[0], dict) and self.rng.random() < 0.7:
            containers[0][self.rng.choice(["image", "workingDir", "name"])] = "changed"
        return near

    def admission_input(self, native: Iterable[str] = ()) -> dict[str, Any]:
        """An input as `PolicyRuntime._rego_input` makes it, for a request skipping the policies `native`."""
        rng = self.rng
        pod = self._maybe(self._pod(), 0.9)
        request = _present({
            "uid": self._maybe("req-" + str(rng.randrange(1000)), 0.95),
            "kind": {"group": "", "version": "v1", "kind": self._odd("Pod")},
            "operation": rng.choice(["CREATE", "CREATE", "UPDATE", "DELETE"]),
            "namespace": self._maybe(rng.choice(["default", "team-a", "bad"])),
            "object": pod,
            "oldObject": rng.choice([None, _ABSENT, self._pod(), self._near(pod)]),
            "userInfo": self._maybe(self._odd({"username": self._odd(rng.choice(["alice", "bad", "system:x"])),
                                               "groups": self._odd(rng.sample(STRINGS, rng.randrange(0, 3)))})),
            "dryRun": self._maybe(rng.random() < 0.2, 0.5),
        })
        kgwe: dict[str, Any] = {"active": {}}
        native = list(native)
        if native:
            kgwe["native"] = dict.fromkeys(native, True)
        return {
            "request": request,
            "namespaceObject": rng.choice([None, {}, {"metadata": _present({
                "name": rng.choice(["default", "team-a", "bad"]), "labels": self._maybe(self._labels())})}]),
            "intent": rng.choice([None, {}, _present({
                "gpus": self._odd(rng.choice([0, 1, 2, 8])),
                # Now and then a label key: some refs index the labels with it.
                "profile": self._maybe(self._odd(rng.choice(["1g.10gb", "app", "kgwe.io/x"]))),
                "shareable": self._maybe(rng.random() < 0.5)})]),
            "tenant": rng.choice([None, "team-a", {"name": self._odd(rng.choice(["team-a", "bad"])), "tier": "gold"}]),
            "params": rng.choice([{}, {}, {"limit": rng.choice([1, 2, "2"])}]),
            "kgwe": kgwe,
        }


class _Absent:
    pass


_ABSENT: Any = _Absent()


def _present(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not _ABSENT}


__all__ = ["INPUT_REFS", "GeneratedSet", "RegoGenerator"]
