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

The inputs vary presence, types (a string where an object is expected, a number where a string is,
null, empty objects and lists), nesting and values drawn from small pools, so conditions hold about as
often as not and built-ins sometimes fail on a wrong type (failures are compared too).
"""

from __future__ import annotations

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
STRINGS = ["a", "b", "bad", "gpu-job", "x", "kgwe.io/x", "", "CREATE", "UPDATE", "nvcr.io/cuda:12"]
PREFIXES = ["b", "a", "nvcr.io/", "kgwe.io/", "g", ""]
KEYS = ["app", "kgwe.io/x", "kgwe.io/tier", "team", "nvidia.com/gpu", "name", "image"]


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

    def fresh(self, stem: str) -> str:
        self._count += 1
        return f"{stem}{self._count}"

    # -- values -----------------------------------------------------------------------------------

    def input_ref(self) -> tuple[Rego, str]:
        rng = self.rng
        if self.pod_alias and rng.random() < 0.25:
            self.features.add("import-alias")
            return rng.choice(POD_REFS)
        ref, kind = rng.choice(INPUT_REFS)
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
            root, key_text = rng.choice([
                ("input.request", rng.choice(['"object"', 'lower("OBJECT")', '"oldObject"'])),
                ("input.request.object.metadata.labels", rng.choice(['"app"', 'concat("/", ["kgwe.io", "x"])'])),
            ] if rng.random() < 0.9 else [("input", rng.choice(['"tenant"', 'concat("", ["int", "ent"])']))])
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
            left, right = rng.choice(WHOLE_PAIRS)
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
            left, right = rng.choice(WHOLE_PAIRS)
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
            targets = [r for r, kind in INPUT_REFS if kind == "obj" and "[" not in r]
            target = rng.choice([*targets, *(f"{a}.metadata" for a in self.aliases)])
            self.rules.append(f"{name} := {target}\n")
            self.aliases.append(name)
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
            body = [*pre, f"v := {value} with {target} as {json.dumps(rng.choice(STRINGS))}"]
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
        conditions = self.body(rng.choice([1, 1, 1, 2]))
        tag = f"{self.package} {kind} {self.fresh('r')}"
        roll = rng.random()
        if roll < 0.2:
            # The head itself reads the input.
            value, _, pre = self.value()
            self.features.add("head-reads-input")
            self.rules.append(f"{kind} contains {value} if {{\n\t" + "\n\t".join([*pre, *conditions]) + "\n}\n")
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

    # -- policy sets ------------------------------------------------------------------------------------

    def library(self, package: str) -> str:
        """A library package: rules that read the input and one-argument functions (some take the whole
        input or read it themselves)."""
        rng = self.rng
        rules = [
            f"r_any := {rng.choice([r for r, _ in INPUT_REFS if '[_]' not in r])}",
            "r_labels := object.get(input.request.object.metadata, \"labels\", {})",
            "r_images := {c.image | some c in input.request.object.spec.containers}",
            "f_norm(x) := lower(x) if { is_string(x) } else := x",
            "f_keys(x) := {k | some k, _ in x} if { is_object(x) } else := set()",
            f"f_whole(x) := {rng.choice(['x', 'input.intent', 'json.marshal(x)'])} if {{ x != null }} else := null",
        ]
        if rng.random() < 0.3:
            rules.append("r_pod := input.request.object")
        return f"package {package}\n\nimport rego.v1\n\n" + "\n\n".join(rules) + "\n"

    def policy_set(self) -> GeneratedSet:
        rng = self.rng
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

    def _container(self) -> dict[str, Any]:
        rng = self.rng
        container = {
            "name": self._odd(rng.choice(["main", "side", "bad", "a"])),
            "image": self._odd(rng.choice(["nvcr.io/cuda:12", "bad/image", "busybox", "a", "gpu-job"])),
            "resources": self._maybe({"limits": self._odd({"nvidia.com/gpu": self._odd(rng.choice(["1", "2", 1]))})}),
            "securityContext": self._maybe({"privileged": self._odd(rng.random() < 0.3)}, 0.5),
            "env": self._maybe([{"name": "A", "value": rng.choice(STRINGS)}], 0.4),
        }
        return _present(container)

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
                "containers": self._odd([self._container() for _ in range(rng.randrange(0, 3))]),
                "initContainers": self._maybe([self._container()], 0.3),
                "nodeSelector": self._maybe(self._labels(), 0.4),
                "runtimeClassName": self._maybe(self._odd("nvidia"), 0.3),
                "hostNetwork": self._maybe(self._odd(rng.random() < 0.3), 0.3),
                "tolerations": self._maybe([{"key": "nvidia.com/gpu", "operator": "Exists"}], 0.3),
            })),
        }
        return self._odd(pod)

    def admission_input(self, native: Iterable[str] = ()) -> dict[str, Any]:
        """An input as `PolicyRuntime._rego_input` makes it, for a request skipping the policies `native`."""
        rng = self.rng
        request = _present({
            "uid": self._maybe("req-" + str(rng.randrange(1000)), 0.95),
            "kind": {"group": "", "version": "v1", "kind": self._odd("Pod")},
            "operation": rng.choice(["CREATE", "CREATE", "UPDATE", "DELETE"]),
            "namespace": self._maybe(rng.choice(["default", "team-a", "bad"])),
            "object": self._maybe(self._pod(), 0.9),
            "oldObject": rng.choice([None, _ABSENT, self._pod()]),
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
