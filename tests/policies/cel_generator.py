"""Seeded random CEL expressions over pod-shaped data, for the differential tests.

`CelGenerator(seed).expression()` returns a `Generated`: the expression's text, and a `plain` text
that must mean the same thing. In the common grammar (`extended=False`) both engines support every
construct and the two texts are equal. In the extended grammar (cel-expr-python only) the text may use
`cel.bind`, optional values (`.?field`, `[?key]`, `optional.of/none`, `optMap`, `optFlatMap`, `or`,
`orValue`, `hasValue`), the three-argument `map` and the strings extension; `plain` then spells the same
value without binds and optionals (a bound variable written out where it is read, an optional as a
condition and a value), so one engine can be its own oracle.

The grammar is typed, so generated expressions pass the type checker; types are
`bool int str dbl li ls lc ms c` (list of ints, of strings, of containers, a map of strings, a
container) and, extended only, `oi os` (optional int, optional string).
Comprehension variables are drawn from a small pool, so nested comprehensions shadow each other, and
lists are as often empty or decided at their first or last element as not.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

# Pod-shaped objects every expression is evaluated against: several containers, labels, annotations,
# resources, lists of ints and strings, nested maps; the second and third lack what the first has.
PODS: list[dict[str, Any]] = [
    {
        "metadata": {
            "name": "train-0", "namespace": "team-a",
            "labels": {"app": "trainer", "tier": "gpu", "kgwe.io/owner": "alice"},
            "annotations": {"note": "a,b,c", "empty": ""},
        },
        "spec": {
            "containers": [
                {"name": "main", "image": "nvcr.io/pytorch:24.01", "ports": [8080, 9090],
                 "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "4"}}},
                {"name": "side", "image": "busybox", "ports": []},
                {"name": "log", "image": "fluent/bit", "ports": [2020], "resources": {}},
            ],
            "data": {"ints": [3, 1, 2, 3], "strs": ["b", "a", "c"], "empty": [],
                     "nested": {"a": {"b": {"c": 1}}, "e": {}}, "ratio": 0.5, "count": 7},
        },
    },
    {
        "metadata": {"name": "solo", "namespace": "team-b", "labels": {"app": "solo"}, "annotations": {}},
        "spec": {
            "containers": [{"name": "only", "image": "nvcr.io/cuda", "ports": [1],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            "data": {"ints": [], "strs": ["x"], "empty": [], "nested": {"a": {}, "e": {"f": 2}},
                     "ratio": 2.0, "count": 0},
        },
    },
    {
        "metadata": {"name": "x", "namespace": "default", "labels": {}, "annotations": {"note": ""}},
        "spec": {
            "containers": [{"name": "a", "image": "a", "ports": [0, 0]}, {"name": "b", "image": "b", "ports": []}],
            "data": {"ints": [-5, 10], "strs": [], "empty": [], "nested": {"a": {"b": {}}, "e": {}},
                     "ratio": -1.5, "count": -3},
        },
    },
]

_VARS = ("x", "y", "c", "k")
# A value of each type, for the branch of a plain form that is never taken.
_DUMMY = {"bool": "false", "int": "0", "str": "''", "li": "[]", "ls": "[]"}
_LABEL_KEYS = ("app", "tier", "kgwe.io/owner", "missing")
_STRINGS = ("", "a", "b", "main", "side", "trainer", "gpu", "nvcr.io/", "team-a", "x", "a,b,c")
_QUANTITIES = ("'1Gi'", "'1024Mi'", "'500m'", "'2'", "'0.5'", "'1e3'", "'x'", "'-1k'",
               "object.spec.containers[0].resources.limits['nvidia.com/gpu']")
_REGEXES = ("^a", "b$", "^[a-z]+$", "i", "^nvcr\\\\.io/", "[0-9]+")
# Each is a comprehension that stops at its first element (or runs to the end), evaluated before an
# expression by the context checks: the sequences in which cel-cpp's shared slots went stale.
EARLY_STOPS = (
    "[1, 2, 3].exists(x, x == 1)", "[1, 2, 3].all(x, x == 2)", "object.spec.containers.exists(c, true)",
    "!object.spec.containers.all(c, false)", "[0, 1].exists_one(x, x == 1)", "[5].filter(y, y > 1) == [5]",
)


@dataclass(frozen=True)
class Generated:
    text: str
    plain: str


@dataclass(frozen=True)
class _E:
    """A generated expression: as written, and in plain form (see the module's docstring)."""

    text: str
    plain: str


@dataclass(frozen=True)
class _Opt:
    """An optional value: as written, and in plain form as (is it set, its value when set).

    `has` fails where the optional's evaluation fails: plain forms join conditions with `?:`, never with
    `&&` or `||`, which would absorb the failure."""

    text: str
    has: str
    value: str


@dataclass
class _Scope:
    # Variable -> (its type, its plain form). Comprehension variables are their own plain form;
    # a bound variable's plain form is its initialiser's plain text.
    variables: dict[str, tuple[str, str]] = field(default_factory=dict)
    reserved: frozenset[str] = frozenset()  # names a new comprehension must not take (see _bind)

    def with_var(self, name: str, kind: str, plain: str) -> _Scope:
        return _Scope({**self.variables, name: (kind, plain)}, self.reserved)


def _same(text: str) -> _E:
    return _E(text, text)


def _join(template: str, *parts: _E) -> _E:
    return _E(template.format(*(p.text for p in parts)), template.format(*(p.plain for p in parts)))


class CelGenerator:
    """Random typed CEL expressions; the same seed gives the same sequence."""

    def __init__(self, seed: int, *, extended: bool = False, max_depth: int = 4) -> None:
        self._rng = random.Random(seed)
        self._extended = extended
        self._max_depth = max_depth

    def expression(self) -> Generated:
        kind = self._rng.choice(("bool", "bool", "bool", "int", "str", "li", "ls"))
        made = self._gen(kind, 0, _Scope())
        return Generated(made.text, made.plain)

    def condition(self) -> Generated:
        """A boolean expression."""
        made = self._bool(0, _Scope())
        return Generated(made.text, made.plain)

    def member_condition(self) -> Generated:
        """A macro over the pod's containers whose body reads its member (`object.spec.containers.all(c,
        ...)`): what the expression reads of each member is then narrower than the member, except where
        the body uses it whole (`c == c`, `size(c)`). cel-expr-python only (optional values)."""
        macro = self._pick(["exists", "all", "exists_one", "map"])
        var = self._pick([v for v in _VARS if v != "y"])
        inner = _Scope().with_var(var, "c", var)
        if macro == "map":
            value = self._pick([
                lambda: _same(f"{var}.name"),
                lambda: _same(f"int({var}.?resources.?limits['nvidia.com/gpu'].orValue('0'))"),
                lambda: _same(f"size({var}.ports)"),
                lambda: self._gen(self._pick(["int", "str", "bool"]), 1, inner),
            ])()
            return Generated(f"object.spec.containers.map({var}, {value.text})",
                             f"object.spec.containers.map({var}, {value.text})")
        body = self._member_predicate(var, inner, 0)
        text = f"object.spec.containers.{macro}({var}, {body})"
        if self._rng.random() < 0.25:  # `filter` answers with members: whatever reads them next
            kept = f"object.spec.containers.filter({var}, {body})"
            text = self._pick([f"{kept}.size() > 0", f"{kept}[0].image == 'busybox'",
                               f"{kept}.map(y, y.image).size() > 1", f"{kept} == object.spec.containers"])
        return Generated(text, text)

    def _member_predicate(self, var: str, scope: _Scope, depth: int) -> str:
        if depth < 2 and self._rng.random() < 0.45:
            left, right = self._member_predicate(var, scope, depth + 1), self._member_predicate(var, scope, depth + 1)
            return self._pick([f"({left} && {right})", f"({left} || {right})", f"!({left})"])
        return self._pick([
            lambda: f"{var}.name == '{self._pick(['main', 'side', 'only', 'a'])}'",
            lambda: f"{var}.image.startsWith('nvcr.io/')",
            lambda: f"has({var}.resources)",
            lambda: f"has({var}.resources.limits)",
            lambda: f"size({var}.ports) > {self._rng.randint(0, 1)}",
            lambda: f"{var}.ports.exists(p, p > 8000)",
            lambda: f"{var}.ports.all(p, p >= 1)",
            lambda: f"'nvidia.com/gpu' in {var}.?resources.?limits.orValue({{}})",
            lambda: f"{var}.resources.limits['cpu'] == '4'",
            lambda: f"int({var}.?resources.?limits['nvidia.com/gpu'].orValue('0')) > 1",
            lambda: f"{var}.?resources.?limits.orValue({{}}).size() > 0",
            lambda: f"{var} == {var}",
            lambda: f"size({var}) > 3",
            lambda: self._bool(2, scope).text,
        ])()

    # -- helpers ------------------------------------------------------------------------------

    def _pick(self, options: Sequence[Any]) -> Any:
        return self._rng.choice(options)

    def _leaf(self, depth: int) -> bool:
        return depth >= self._max_depth or self._rng.random() < 0.2 + 0.15 * depth

    def _vars_of(self, scope: _Scope, kind: str) -> list[_E]:
        return [_E(name, plain if plain == name else f"({plain})")
                for name, (k, plain) in scope.variables.items() if k == kind]

    def _variable(self, scope: _Scope, kind: str) -> _E | None:
        """Often a variable in scope: bound and comprehension variables are read where they went wrong."""
        own = self._vars_of(scope, kind)
        return self._pick(own) if own and self._rng.random() < 0.3 else None

    def _fresh(self, scope: _Scope) -> str:
        names = [n for n in _VARS if n not in scope.reserved]
        return self._pick(names)

    def _gen(self, kind: str, depth: int, scope: _Scope) -> _E:
        made: _E = getattr(self, f"_{kind}")(depth, scope)
        return made

    def _comprehension(self, depth: int, scope: _Scope, elem: str, body_kind: str) -> tuple[_E, str, _E]:
        """A range of element type `elem`, a variable, and a body of `body_kind` in its scope."""
        source = self._gen({"int": "li", "str": "ls", "c": "lc"}[elem], depth + 1, scope)
        var = self._fresh(scope)
        body = self._gen(body_kind, depth + 1, scope.with_var(var, elem, var))
        return source, var, body

    def _bind(self, kind: str, depth: int, scope: _Scope) -> _E:
        """`cel.bind(v, init, body)`; plain: the body with `v` written as `(init)`."""
        init_kind = self._pick(["int", "str", "li", "bool"])
        init = self._gen(init_kind, depth + 1, scope)
        var = self._pick(["v", "w", *_VARS])
        # The init's plain text is copied into the body: no comprehension there may take a name it reads.
        reserved = scope.reserved | {n for n in scope.variables if re.search(rf"\b{n}\b", init.plain)}
        inner = _Scope({**scope.variables, var: (init_kind, init.plain)}, frozenset(reserved))
        body = self._gen(kind, depth + 1, inner)
        # The binding is eager (as cel-go's, and KGWE's): a failing init fails the bind even when the body
        # does not read the variable. `x == x` is true for every value of these types, or fails.
        return _E(f"cel.bind({var}, {init.text}, {body.text})",
                  f"(({init.plain}) == ({init.plain}) ? {body.plain} : {_DUMMY[kind]})")

    # -- bool ---------------------------------------------------------------------------------

    def _bool(self, depth: int, scope: _Scope) -> _E:
        if (variable := self._variable(scope, "bool")) is not None:
            return variable
        if self._leaf(depth):
            return self._pick([
                lambda: _same(self._pick(["true", "false"])),
                lambda: _same(f"has(object.metadata.labels.{self._pick(['app', 'tier', 'missing'])})"),
                lambda: _same(f"has(object.spec.data.nested.{self._pick(['a', 'e'])}."
                              f"{self._pick(['b', 'f', 'z'])})"),
                lambda: _same(f"'{self._pick(_LABEL_KEYS)}' in object.metadata.labels"),
                lambda: _same(f"has(object.metadata.annotations.{self._pick(['note', 'empty'])})"),
                lambda: _same(self._pick(["1 / 0 == 1", "object.metadata.labels['missing'] == 'x'",
                                          "object.spec.data.ints[9] > 0"])),
                *[lambda v=v: v for v in self._vars_of(scope, "bool")],
            ])()
        options = [
            lambda: _join("{} && {}", self._bool(depth + 1, scope), self._bool(depth + 1, scope)),
            lambda: _join("{} || {}", self._bool(depth + 1, scope), self._bool(depth + 1, scope)),
            lambda: _join("({} && {})", self._bool(depth + 1, scope), self._bool(depth + 1, scope)),
            lambda: _join("({} || {})", self._bool(depth + 1, scope), self._bool(depth + 1, scope)),
            lambda: _join("!({})", self._bool(depth + 1, scope)),
            lambda: _join("({} ? {} : {})", self._bool(depth + 1, scope), self._bool(depth + 1, scope),
                          self._bool(depth + 1, scope)),
            lambda: _join("{} " + self._pick(["==", "!=", "<", "<=", ">", ">="]) + " {}",
                          self._int(depth + 1, scope), self._int(depth + 1, scope)),
            lambda: _join("{} " + self._pick(["==", "!=", "<", ">="]) + " {}",
                          self._str(depth + 1, scope), self._str(depth + 1, scope)),
            lambda: _join("{}." + self._pick(["startsWith", "endsWith", "contains"]) + "({})",
                          self._str(depth + 1, scope), self._str(depth + 1, scope)),
            lambda: _join("{}.matches('" + self._pick(list(_REGEXES)) + "')", self._str(depth + 1, scope)),
            lambda: _join("{} in {}", self._int(depth + 1, scope), self._li(depth + 1, scope)),
            lambda: _join("{} in {}", self._str(depth + 1, scope), self._ls(depth + 1, scope)),
            lambda: _join("{} in object.metadata.labels", self._str(depth + 1, scope)),
            lambda: _join("{} == {}", self._li(depth + 1, scope), self._li(depth + 1, scope)),
            lambda: _join("{} " + self._pick(["<", ">=", "=="]) + " {}",
                          self._dbl(depth + 1, scope), self._dbl(depth + 1, scope)),
            lambda: _join("size({}) " + self._pick(["==", ">", "<"]) + " {}",
                          self._ls(depth + 1, scope), self._int(depth + 1, scope)),
            lambda: self._macro_bool(depth, scope),
            lambda: self._macro_bool(depth, scope),
            lambda: self._macro_bool(depth, scope),
            lambda: self._labels_macro(depth, scope),
            # Kubernetes' library (policies/engines/cel_k8s_library.py), bound into both engines
            lambda: _join("{}.isSorted()", self._pick([self._li, self._ls])(depth + 1, scope)),
            lambda: _join("isQuantity({})", self._pick([self._str(depth + 1, scope), self._quantity_text()])),
            lambda: _join("{}." + self._pick(["isLessThan", "isGreaterThan"]) + "({})",
                          self._quantity(depth, scope), self._quantity(depth, scope)),
            lambda: _join("{} == {}", self._quantity(depth, scope), self._quantity(depth, scope)),
        ]
        if self._extended:
            options += [
                lambda: self._bind("bool", depth, scope),
                lambda: self._bind("bool", depth, scope),
                lambda: self._opt_has(depth, scope),
                lambda: self._opt_has(depth, scope),
                lambda: self._mixed_numbers(depth, scope),
                lambda: _join("{}.lowerAscii() == {}", self._str(depth + 1, scope), self._str(depth + 1, scope)),
            ]
        return self._pick(options)()

    def _labels_macro(self, depth: int, scope: _Scope) -> _E:
        """A macro over a map's keys (order-free: `map` over a map is left out, its order is the engine's)."""
        macro = self._pick(["exists", "all", "exists_one"])
        var = self._fresh(scope)
        body = self._gen("bool", depth + 1, scope.with_var(var, "str", var))
        return _E(f"object.metadata.labels.{macro}({var}, {body.text})",
                  f"object.metadata.labels.{macro}({var}, {body.plain})")

    def _mixed_numbers(self, depth: int, scope: _Scope) -> _E:
        """Runtime heterogeneous comparison (int against double through `dyn`); plain: an explicit conversion."""
        number, other = self._int(depth + 1, scope), self._dbl(depth + 1, scope)
        op = self._pick(["==", "!=", "<", "<=", ">", ">="])
        return _E(f"dyn({number.text}) {op} dyn({other.text})", f"double({number.plain}) {op} {other.plain}")

    def _macro_bool(self, depth: int, scope: _Scope) -> _E:
        macro = self._pick(["exists", "all", "exists_one"])
        elem = self._pick(["int", "str", "c"])
        source, var, body = self._comprehension(depth, scope, elem, "bool")
        text = f"{source.text}.{macro}({var}, {body.text})"
        if not self._extended:
            return _E(text, f"{source.plain}.{macro}({var}, {body.plain})")
        # The plain forms are the macros' duals, equal under CEL's error rules too: `exists` is an
        # error-absorbing OR over the elements, `all` an AND, `exists_one` counts strictly, as `filter` does.
        plain = {
            "exists": f"!{source.plain}.all({var}, !({body.plain}))",
            "all": f"!{source.plain}.exists({var}, !({body.plain}))",
            "exists_one": f"(size({source.plain}.filter({var}, {body.plain})) == 1)",
        }[macro]
        return _E(text, plain)

    # -- numbers and strings ------------------------------------------------------------------

    def _int(self, depth: int, scope: _Scope) -> _E:
        if (variable := self._variable(scope, "int")) is not None:
            return variable
        if self._leaf(depth):
            return self._pick([
                lambda: _same(str(self._rng.randint(-3, 10))),
                lambda: _same("object.spec.data.count"),
                lambda: _same("size(object.spec.containers)"),
                lambda: _same(f"object.spec.data.ints[{self._rng.randint(0, 2)}]"),
                *[lambda v=v: v for v in self._vars_of(scope, "int")],
            ])()
        options = [
            lambda: _join("({} " + self._pick(["+", "-", "*", "/", "%"]) + " {})",
                          self._int(depth + 1, scope), self._int(depth + 1, scope)),
            lambda: _join("size({})", self._li(depth + 1, scope)),
            lambda: _join("size({})", self._str(depth + 1, scope)),
            lambda: _join("{}.size()", self._ls(depth + 1, scope)),
            lambda: _join("({} ? {} : {})", self._bool(depth + 1, scope), self._int(depth + 1, scope),
                          self._int(depth + 1, scope)),
            lambda: _join("{}[" + str(self._rng.randint(0, 2)) + "]", self._li(depth + 1, scope)),
            lambda: _join("int({})", self._dbl(depth + 1, scope)),
            lambda: _join("int({})", self._pick([_same("'12'"), _same("'-4'"), _same("'x'")])),
            lambda: _join("int(uint({}))", self._int(depth + 1, scope)),
            lambda: _join("size({}.ports)", self._c(depth + 1, scope)),
            lambda: _join("{}." + self._pick(["sum()", "min()", "max()"]), self._li(depth + 1, scope)),
            lambda: _join("{}." + self._pick(["indexOf", "lastIndexOf"]) + "({})",
                          self._li(depth + 1, scope), self._int(depth + 1, scope)),
            lambda: _join("{}." + self._pick(["sign()", "asInteger()"]), self._quantity(depth, scope)),
            lambda: _join("{}.compareTo({})", self._quantity(depth, scope), self._quantity(depth, scope)),
            lambda: _join("{}.add({}).asInteger()", self._quantity(depth, scope), self._int(depth + 1, scope)),
        ]
        if self._extended:
            options += [
                lambda: self._bind("int", depth, scope),
                lambda: self._opt_or_value("int", depth, scope),
            ]
        return self._pick(options)()

    def _dbl(self, depth: int, scope: _Scope) -> _E:
        if self._leaf(depth):
            return self._pick([
                lambda: _same(self._pick(["0.5", "2.0", "-1.5", "0.0", "1e3"])),
                lambda: _same("object.spec.data.ratio"),
            ])()
        # celpy divides by a zero double wrongly (see test_cel_differential.CELPY_GAPS): the common grammar
        # divides by non-zero literals only.
        divisor = self._dbl(depth + 1, scope) if self._extended else _same(self._pick(["2.0", "-0.5", "4.0"]))
        return self._pick([
            lambda: _join("({} " + self._pick(["+", "-", "*"]) + " {})",
                          self._dbl(depth + 1, scope), self._dbl(depth + 1, scope)),
            lambda: _join("({} / {})", self._dbl(depth + 1, scope), divisor),
            lambda: _join("double({})", self._int(depth + 1, scope)),
            lambda: _join("double({})", self._pick([_same("'1.25'"), _same("'x'")])),
        ])()

    def _str(self, depth: int, scope: _Scope) -> _E:
        if (variable := self._variable(scope, "str")) is not None:
            return variable
        if self._leaf(depth):
            return self._pick([
                lambda: _same(repr(self._pick(list(_STRINGS)))),
                lambda: _same("object.metadata.name"),
                lambda: _same("object.metadata.namespace"),
                lambda: _same(f"object.metadata.labels['{self._pick(list(_LABEL_KEYS))}']"),
                lambda: _same("object.metadata.annotations.note"),
                *[lambda v=v: v for v in self._vars_of(scope, "str")],
            ])()
        options = [
            lambda: _join("({} + {})", self._str(depth + 1, scope), self._str(depth + 1, scope)),
            lambda: _join("({} ? {} : {})", self._bool(depth + 1, scope), self._str(depth + 1, scope),
                          self._str(depth + 1, scope)),
            lambda: _join("{}[" + str(self._rng.randint(0, 1)) + "]", self._ls(depth + 1, scope)),
            lambda: _join("string({})", self._int(depth + 1, scope)),
            lambda: _join("{}.name", self._c(depth + 1, scope)),
            lambda: _join("{}.image", self._c(depth + 1, scope)),
            lambda: _join("{}.find('" + self._pick(list(_REGEXES)) + "')", self._str(depth + 1, scope)),
        ]
        if self._extended:
            options += [
                lambda: self._bind("str", depth, scope),
                lambda: self._opt_or_value("str", depth, scope),
                lambda: _join("{}." + self._pick(["lowerAscii()", "upperAscii()", "trim()"]),
                              self._str(depth + 1, scope)),
            ]
        return self._pick(options)()

    # -- lists, maps, containers ----------------------------------------------------------------

    def _li(self, depth: int, scope: _Scope) -> _E:
        if (variable := self._variable(scope, "li")) is not None:
            return variable
        if self._leaf(depth):
            return self._pick([
                lambda: _same(self._pick(["[]", "[1]", "[1, 2, 3]", "[3, 3]", "[0, -1, 2]"])),
                lambda: _same("object.spec.data.ints"),
                lambda: _same("object.spec.containers[0].ports"),
                *[lambda v=v: v for v in self._vars_of(scope, "li")],
            ])()
        options = [
            lambda: self._map_list("int", depth, scope),
            lambda: self._filter_list("int", depth, scope),
            lambda: _join("({} + {})", self._li(depth + 1, scope), self._li(depth + 1, scope)),
            lambda: _join("[{}, {}]", self._int(depth + 1, scope), self._int(depth + 1, scope)),
            lambda: _join("({} ? {} : {})", self._bool(depth + 1, scope), self._li(depth + 1, scope),
                          self._li(depth + 1, scope)),
            lambda: _join("{}.ports", self._c(depth + 1, scope)),
        ]
        if self._extended:
            options += [lambda: self._bind("li", depth, scope), lambda: self._map3("int", depth, scope)]
        return self._pick(options)()

    def _ls(self, depth: int, scope: _Scope) -> _E:
        if (variable := self._variable(scope, "ls")) is not None:
            return variable
        if self._leaf(depth):
            return self._pick([
                lambda: _same(self._pick(["[]", "['a']", "['a', 'b']", "['main', 'x', 'main']"])),
                lambda: _same("object.spec.data.strs"),
                lambda: _same("object.spec.containers.map(c, c.name)"),
                *[lambda v=v: v for v in self._vars_of(scope, "ls")],
            ])()
        options = [
            lambda: self._map_list("str", depth, scope),
            lambda: self._filter_list("str", depth, scope),
            lambda: _join("({} + {})", self._ls(depth + 1, scope), self._ls(depth + 1, scope)),
            lambda: _join("[{}]", self._str(depth + 1, scope)),
            lambda: _join("{}.findAll('" + self._pick(list(_REGEXES)) + "'" + self._pick(["", ", 1", ", -1"]) + ")",
                          self._str(depth + 1, scope)),
        ]
        if self._extended:
            options += [
                lambda: self._bind("ls", depth, scope),
                lambda: self._map3("str", depth, scope),
                lambda: _join("{}.split(',')", self._str(depth + 1, scope)),
            ]
        return self._pick(options)()

    def _lc(self, depth: int, scope: _Scope) -> _E:
        if self._leaf(depth) or self._rng.random() < 0.5:
            return _same("object.spec.containers")
        var = self._fresh(scope)
        body = self._gen("bool", depth + 1, scope.with_var(var, "c", var))
        return _E(f"object.spec.containers.filter({var}, {body.text})",
                  f"object.spec.containers.filter({var}, {body.plain})")

    def _c(self, depth: int, scope: _Scope) -> _E:
        own = self._vars_of(scope, "c")
        if own and self._rng.random() < 0.7:
            return self._pick(own)
        return _join("{}[" + str(self._rng.randint(0, 1)) + "]", self._lc(depth + 1, scope))

    def _quantity_text(self) -> _E:
        return _same(self._pick(list(_QUANTITIES)))

    def _quantity(self, depth: int, scope: _Scope) -> _E:
        """A quantity: parsed, or the result of quantity arithmetic."""
        parsed = _join("quantity({})", self._quantity_text())
        if self._leaf(depth + 1):
            return parsed
        return _join("{}." + self._pick(["add", "sub"]) + "({})", parsed,
                     self._pick([lambda: _join("quantity({})", self._quantity_text()),
                                 lambda: _same(str(self._rng.randint(-2, 3)))])())

    def _map_list(self, elem: str, depth: int, scope: _Scope) -> _E:
        source_elem = self._pick(["int", "str", "c"])
        source, var, body = self._comprehension(depth, scope, source_elem, elem)
        return _E(f"{source.text}.map({var}, {body.text})", f"{source.plain}.map({var}, {body.plain})")

    def _filter_list(self, elem: str, depth: int, scope: _Scope) -> _E:
        source, var, body = self._comprehension(depth, scope, elem, "bool")
        return _E(f"{source.text}.filter({var}, {body.text})", f"{source.plain}.filter({var}, {body.plain})")

    def _map3(self, elem: str, depth: int, scope: _Scope) -> _E:
        """Three-argument map; plain: a filter, then a map."""
        source_elem = self._pick(["int", "str", "c"])
        source, var, keep = self._comprehension(depth, scope, source_elem, "bool")
        value = self._gen(elem, depth + 1, scope.with_var(var, source_elem, var))
        return _E(f"{source.text}.map({var}, {keep.text}, {value.text})",
                  f"{source.plain}.filter({var}, {keep.plain}).map({var}, {value.plain})")

    # -- optionals (extended) -------------------------------------------------------------------

    def _opt(self, kind: str, depth: int, scope: _Scope) -> _Opt:
        """An optional int ('int') or string ('str')."""
        default = _DUMMY[kind]
        leaves = [
            lambda: self._opt_of(kind, depth, scope),
            lambda: _Opt("optional.none()", "false", default),
        ]
        if kind == "str":
            key = self._pick(list(_LABEL_KEYS))
            leaves += [
                lambda: _Opt(f"object.metadata.labels[?'{key}']", f"('{key}' in object.metadata.labels)",
                             f"object.metadata.labels['{key}']"),
                lambda: _Opt("object.?metadata.?annotations.?note",
                             "(has(object.metadata) && has(object.metadata.annotations) && "
                             "has(object.metadata.annotations.note))", "object.metadata.annotations.note"),
            ]
        else:
            index = self._rng.randint(-1, 3)
            leaves += [lambda: _Opt(f"object.spec.data.ints[?{index}]",
                                    f"({index} >= 0 && {index} < size(object.spec.data.ints))",
                                    f"object.spec.data.ints[{index}]" if index >= 0 else "0")]
        if self._leaf(depth):
            return self._pick(leaves)()
        return self._pick([
            *leaves,
            lambda: self._opt_map(kind, depth, scope),
            lambda: self._opt_map(kind, depth, scope),
            lambda: self._opt_flat_map(kind, depth, scope),
            lambda: self._opt_or(kind, depth, scope),
        ])()

    def _opt_of(self, kind: str, depth: int, scope: _Scope) -> _Opt:
        value = self._gen(kind, depth + 1, scope)
        # optional.of(v) fails when v fails: so does `v == v`, true otherwise.
        return _Opt(f"optional.of({value.text})", f"(({value.plain}) == ({value.plain}))", value.plain)

    def _opt_map(self, kind: str, depth: int, scope: _Scope) -> _Opt:
        source_kind = self._pick(["int", "str"])
        source = self._opt(source_kind, depth + 1, scope)
        var = self._pick(["v", "w", "x"])
        reserved = scope.reserved | {n for n in scope.variables if re.search(rf"\b{n}\b", source.value)}
        body = self._gen(kind, depth + 1,
                         _Scope({**scope.variables, var: (source_kind, source.value)}, frozenset(reserved)))
        # Set when the source is, and fails when the body fails on the source's value.
        return _Opt(f"{source.text}.optMap({var}, {body.text})",
                    f"({source.has} ? ({body.plain}) == ({body.plain}) : false)",
                    f"({source.has} ? {body.plain} : {_DUMMY[kind]})")

    def _opt_flat_map(self, kind: str, depth: int, scope: _Scope) -> _Opt:
        source_kind = self._pick(["int", "str"])
        source = self._opt(source_kind, depth + 1, scope)
        var = self._pick(["v", "w"])
        reserved = scope.reserved | {n for n in scope.variables if re.search(rf"\b{n}\b", source.value)}
        inner = self._opt(kind, depth + 1,
                          _Scope({**scope.variables, var: (source_kind, source.value)}, frozenset(reserved)))
        return _Opt(f"{source.text}.optFlatMap({var}, {inner.text})", f"({source.has} ? {inner.has} : false)",
                    inner.value)

    def _opt_or(self, kind: str, depth: int, scope: _Scope) -> _Opt:
        first, second = self._opt(kind, depth + 1, scope), self._opt(kind, depth + 1, scope)
        return _Opt(f"{first.text}.or({second.text})", f"({first.has} ? true : {second.has})",
                    f"({first.has} ? {first.value} : {second.value})")

    def _opt_or_value(self, kind: str, depth: int, scope: _Scope) -> _E:
        opt = self._opt(kind, depth + 1, scope)
        default = self._gen(kind, depth + 1, scope)
        return _E(f"{opt.text}.orValue({default.text})", f"({opt.has} ? {opt.value} : {default.plain})")

    def _opt_has(self, depth: int, scope: _Scope) -> _E:
        opt = self._opt(self._pick(["int", "str"]), depth + 1, scope)
        return _E(f"{opt.text}.hasValue()", opt.has)


# A pod whose collections hold what a container never is (a string, null, a list, a number) and whose maps
# have keys spelled like a projection step or a comment: members read in part must stay what they were.
ODD_POD: dict[str, Any] = {
    "metadata": {"name": "odd", "labels": {"app": "odd", "[*]": "star", "a//b": "slashes"},
                 "annotations": {"kgwe.io//exempt": "no"}},
    "spec": {
        "containers": [{"name": "main", "image": "", "ports": [1], "env": [{"name": "A", "value": "x"}],
                        "resources": {"limits": {"nvidia.com/gpu": "1"}}}, "sidecar", None, [1, 2], 3],
        "data": {"nested": {"a": {"b": 1, "c": 2}, "[*]": {"b": 5, "z": 1}},
                 "matrix": [[{"v": 1, "w": 2}], [{"v": 3}], []]},
    },
}

# Expressions written to make a body see more of a member than its variable's chains, or to hide a read
# from the token reader: shadowing, root-scope dots, binds, optionals, whole members, keys iterated, keys
# spelled like steps, quoted field names, comments.
CUT_ATTACKS = [
    "'app' in .object.metadata.labels",
    "object.spec.containers.exists(c, c.name in.object.metadata.labels)",
    "has(object.metadata.labels.`a//b`) || object.metadata.name == 'odd'",
    "object.metadata.labels.`a//b` == 'slashes' && object.spec.containers.all(c, c.image != '')",
    "object.spec.containers.all(c, c.env.all(c, c.name != ''))",
    "object.spec.containers.all(c, [{'name': 'q'}].all(c, c.name == 'q') && c.image != '')",
    "object.spec.containers.all(c, cel.bind(c, {'image': ''}, c.image == '') && c.name != '')",
    "object.spec.containers.all(c, cel.bind(d, c, d.image != ''))",
    "object.spec.containers.all(object, object.image != '')",
    "object.spec.containers.all(object, .object.metadata.name == 'odd')",
    "object.spec.containers.exists(c, c.?image.orValue('x') == '')",
    "object.spec.containers.exists(c, c[?'image'].orValue('x') == '')",
    "object.spec.containers.exists(c, optional.of(c).optMap(d, d.image).orValue('x') == '')",
    "object.spec.containers.exists(c, 'env' in c)",
    "object.spec.containers.exists(c, c.exists(k, k == 'resources'))",
    "object.spec.containers.exists(c, c.all(k, c[k] != ''))",
    "object.spec.containers.map(c, c.resources).size() > 1",
    "object.spec.containers.map(c, c.env.map(e, e)).size() > 0",
    "object.spec.containers.map(c, c.image == '', c).size() == 1",
    "object.spec.containers.exists_one(c, has(c.resources.limits))",
    "object.spec.containers.exists(c, c == null || type(c) == list || dyn(c) == 3 || size(c) > 5)",
    "object.spec.containers.exists(c, c.env.exists(e, e == c.env[0]))",
    "object.spec.containers.exists(c, {'a': c}.a.image == '' || [c][0].name == '' || (c).image == '')",
    "object.spec.containers.exists(c, c // a comment\n.image == '')",
    "object.spec.containers.exists(c, c.`image` == '')",
    "object.spec.containers.exists(c, object.spec.containers.exists(d, d.image == c.name))",
    "object.spec.containers.exists(c, c.image == '') || object.spec.containers[1] == 'sidecar'",
    "object.spec.data.matrix.all(r, r.all(x, has(x.w)))",
    "object.spec.data.matrix.exists(r, r.exists(x, x.size() == 2))",
    "object.spec.data.nested.all(k, has(k.b))",
    "object.spec.data.nested.all(k, object.spec.data.nested[k].b > 0)",
    "object.spec.data.nested['[*]'].z == 1 && object.spec.data.nested.a.c == 2",
    "object.metadata.labels['[*]'] == 'star'",
    "object.metadata.exists(k, k == 'annotations')",
    "[1, 2].all(x, object.spec.containers.exists(c, c.image == ''))",
]

# The spellings of the pod a cut-attack starts from, the collections it iterates and the fields it reads.
_ROOTS = ("object", ".object", "request.object", ".request.object", "(object)", "cel.bind(o, object, o)",
          "dyn(object)")
_CUT_VARS = ("c", "x", "object", "request", "params")
_COLLECTIONS = ("spec.containers", "spec.data.matrix", "spec.data.nested", "metadata.labels", "metadata", "spec",
                "spec.containers[0]", "spec.containers[0].ports", "spec.data.strs")
_FIELDS = ("name", "image", "ports", "resources", "env", "b", "v", "w", "app", "resources.limits", "`image`",
           "`a//b`")


class CutAttackGenerator:
    """Seeded, untyped expressions that try to make a comprehension's body see more of a member than its
    variable's chains reach, or to hide a read from the token reader (policies/engines/cel_reads.py):
    variables named like the pod's roots or like each other, root-scope dots (after `in` too), binds,
    optionals, members used whole, maps iterated by key, quoted field names, comments and strings that
    spell code. Many fail the type checker: callers keep those cel-expr-python compiles."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def expression(self) -> str:
        var = self._rng.choice(_CUT_VARS)
        macro = self._rng.choice(("all", "exists", "exists_one", "map"))
        source = f"{self._rng.choice(_ROOTS)}.{self._rng.choice(_COLLECTIONS)}"
        if macro == "map":
            # A map's keys come in no fixed order (cel-cpp): the answer is whether some result is a given one.
            value = self._rng.choice((f"{var}.{self._field()}", var, self._use(var, 0)))
            wanted = self._rng.choice(("1", "'x'", "true", "null"))
            text = f"{source}.map({var}, {value}).exists(r, r == {wanted})"
        else:
            text = f"{source}.{macro}({var}, {self._use(var, 0)})"
        if self._rng.random() < 0.3:
            other = f"{self._rng.choice(_ROOTS)}.{self._rng.choice(_COLLECTIONS)}"
            text += f" {self._rng.choice(('&&', '||', '=='))} {other}.exists({var}, {self._use(var, 1)})"
        return text

    def _field(self) -> str:
        return str(self._rng.choice(_FIELDS))

    def _use(self, var: str, depth: int) -> str:
        """A boolean body that reads `var` (or a name shadowing it) some way."""
        roll = self._rng.random()
        if depth < 3 and roll < 0.35:
            inner = self._rng.choice((*_CUT_VARS, var))
            source = self._rng.choice((f"{var}.{self._field()}", var,
                                       f"{self._rng.choice(_ROOTS)}.{self._rng.choice(_COLLECTIONS)}"))
            macro = self._rng.choice(("all", "exists", "exists_one", "map", "filter"))
            body = self._use(self._rng.choice((inner, var)), depth + 1)
            if macro in ("map", "filter"):
                return f"{source}.{macro}({inner}, {body}).size() > 0"
            return f"{source}.{macro}({inner}, {body})"
        if depth < 3 and roll < 0.55:
            operator = self._rng.choice(("&&", "||"))
            return f"({self._use(var, depth + 1)} {operator} {self._use(self._rng.choice(_CUT_VARS), depth + 1)})"
        if depth < 3 and roll < 0.6:
            return f"!({self._use(var, depth + 1)})"
        field_ = self._field()
        key = field_.strip("`")
        return str(self._rng.choice((
            f"{var}.{field_} == 1", f"has({var}.{field_})", f"{var}.?{field_}.orValue(0) == 0",
            f"{var}['{key}'] == 'x'", f"size({var}) > 1", f"{var} == null", f"'name' in {var}",
            f"type({var}) == map", f"{var}.{field_}.size() > 0", f"[{var}][0].{field_} == 1",
            f"cel.bind(q, {var}, q.{field_} == 1)", f"cel.bind({var}, {var}.{field_}, {var} == 1)",
            f"{var}.{field_} in.object.metadata.labels", "'app' in .object.metadata.labels",
            f"{var}.{field_} == 1 // {var}.other\n", f"'{var}.{field_}.all(' == ''",
            f"optional.of({var}).optMap(o, o.{field_}).orValue(0) == 0",
        )))
