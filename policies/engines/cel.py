"""CEL engines behind one small interface: `cel-expr-python` (Google cel-cpp, the default) and
`cel-python` (celpy, pure Python, kept working for portability).

Both get Kubernetes' variables (`object`, `oldObject`, `request`, `params`, `namespaceObject`) and the
library in `policies.engines.cel_k8s_library`. Expressions are compiled once, when a policy set is loaded.
Native modules are imported when an engine is first built, never at import time, so a pre-forking
server loads them in each worker after the fork.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

from policies.engines import cel_k8s_library as lib
from policies.engines.cel_binds import without_lazy_binds
from policies.engines.cel_conversions import strict_conversions
from policies.engines.cel_optionals import optional_maps_refusal, without_lazy_optional_maps
from policies.engines.cel_text import bound, fresh_name, lex, opens_root_name
from policies.engines.cel_values import may_hold_optional, read

# `usage`: the pod's workload's GPU usage (docs/policies.md), null when KGWE has none.
CEL_VARIABLES = ("object", "oldObject", "request", "params", "namespaceObject", "usage")
# Every policy's params, by slot, in the one activation a request shares (engines with
# `shares_activation`). Not a variable policy authors can name: their expressions are checked in an
# environment without it.
PARAMS_TABLE = "kgwe__params"
# Longest expression accepted; Kubernetes bounds CEL by estimated cost, we bound the text and the time.
MAX_EXPRESSION_CHARS = 5000

CelEngineName = Literal["cel-expr-python", "cel-python"]


class CelCompileError(ValueError):
    pass


class CelEvaluationError(RuntimeError):
    pass


class CelProgram(Protocol):
    source: str

    def evaluate(self, activation: Any) -> Any:
        """The expression's value as plain Python; raises CelEvaluationError."""


class CelEngine(Protocol):
    name: str
    # True when programs from `compile_for_policy` read `params` from PARAMS_TABLE: then one activation
    # per request (with PARAMS_TABLE set) serves every policy, whatever its params.
    shares_activation: bool

    def compile(self, expression: str) -> CelProgram:
        """Raises CelCompileError with the engine's message."""

    def compile_for_policy(self, expression: str, params_slot: str) -> CelProgram:
        """`compile`, for a policy whose params are PARAMS_TABLE[params_slot] in a shared activation."""

    def activation(self, variables: Mapping[str, Any]) -> Any:
        """Converts the variables once so several programs can share them."""


def _check_length(expression: str) -> None:
    if not expression.strip():
        raise CelCompileError("empty expression")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CelCompileError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")


def _guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Library errors must become CEL errors, never exceptions escaping the engine."""

    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except lib.CelLibraryError:
            raise
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise lib.CelLibraryError(str(exc)) from exc

    call.__name__ = fn.__name__
    return call


# -- cel-expr-python ---------------------------------------------------------------------------


class _CppProgram:
    def __init__(self, source: str, expression: Any, error_type: Any) -> None:
        self.source = source
        self._expression = expression
        self._error_type = error_type
        self.walk = may_hold_optional(expression.return_type())  # see policies/engines/cel_values.py

    def evaluate(self, activation: Any) -> Any:
        try:
            value = self._expression.eval(activation)
        except Exception as exc:  # the binding raises for evaluation failures it cannot express as values
            raise CelEvaluationError(str(exc)) from exc
        plain, failure = read(value, self._error_type, self.walk)
        if failure is not None:
            raise CelEvaluationError(failure)
        return plain


def _with_params(expression: str, params_slot: str) -> str:
    """`expression` with `params` bound to the policy's entry of PARAMS_TABLE. A root-scope `.params`
    (CEL's leading dot, which no local shadows) means the same variable: it becomes a fresh name bound to
    `params` outside every comprehension, so that it reads the binding too rather than the shared
    activation's empty `params`, and a comprehension variable named `params` cannot capture it."""
    tokens = lex(expression)
    dots = [k for k in range(len(tokens) - 1)
            if tokens[k + 1].text == "params" and tokens[k + 1].kind == "ident" and opens_root_name(tokens, k)]
    if dots:
        root = fresh_name(expression, "kgwe__root_params")
        for k in reversed(dots):
            expression = expression[:tokens[k].start] + root + expression[tokens[k + 1].end:]
        expression = bound(root, "params", expression)
    slot = params_slot.replace("\\", "").replace("'", "")
    return bound("params", f"{PARAMS_TABLE}['{slot}']", expression)


class CelExprPythonEngine:
    """cel-cpp through `cel-expr-python`: type-checked, fast, errors come back as values."""

    name = "cel-expr-python"

    def __init__(self) -> None:
        from cel_expr_python import cel
        from cel_expr_python.ext import ext_bindings, ext_math, ext_optional, ext_strings

        self._cel = cel
        dyn, string, integer = cel.Type.DYN, cel.Type.STRING, cel.Type.INT
        quantity = cel.Type.Map(cel.Type.STRING, cel.Type.DYN)
        dyn_list = cel.Type.List(cel.Type.DYN)

        def member(overload: str, ret: Any, params: list[Any], fn: Callable[..., Any]) -> Any:
            return cel.Overload(overload, ret, params, is_member=True, impl=_guard(fn))

        def glob(overload: str, ret: Any, params: list[Any], fn: Callable[..., Any]) -> Any:
            return cel.Overload(overload, ret, params, impl=_guard(fn))

        functions = [
            cel.FunctionDecl("quantity", [glob("quantity_string", quantity, [string], lib.quantity)]),
            cel.FunctionDecl("isQuantity", [glob("isQuantity_string", cel.Type.BOOL, [string], lib.is_quantity)]),
            cel.FunctionDecl("sign", [member("quantity_sign", integer, [quantity], lib.quantity_sign)]),
            cel.FunctionDecl(
                "isInteger", [member("quantity_isInteger", cel.Type.BOOL, [quantity], lib.quantity_is_integer)]
            ),
            cel.FunctionDecl("asInteger", [member("quantity_asInteger", integer, [quantity], lib.quantity_as_integer)]),
            cel.FunctionDecl(
                "asApproximateFloat",
                [member("quantity_asApproximateFloat", cel.Type.DOUBLE, [quantity], lib.quantity_as_float)],
            ),
            cel.FunctionDecl("add", [
                member("quantity_add", quantity, [quantity, quantity], lib.quantity_add),
                member("quantity_add_int", quantity, [quantity, integer], lib.quantity_add),
            ]),
            cel.FunctionDecl("sub", [
                member("quantity_sub", quantity, [quantity, quantity], lib.quantity_sub),
                member("quantity_sub_int", quantity, [quantity, integer], lib.quantity_sub),
            ]),
            cel.FunctionDecl(
                "isLessThan", [member("quantity_isLessThan", cel.Type.BOOL, [quantity, quantity], lib.quantity_less)]
            ),
            cel.FunctionDecl(
                "isGreaterThan",
                [member("quantity_isGreaterThan", cel.Type.BOOL, [quantity, quantity], lib.quantity_greater)],
            ),
            cel.FunctionDecl(
                "compareTo", [member("quantity_compareTo", integer, [quantity, quantity], lib.quantity_compare)]
            ),
            cel.FunctionDecl("sum", [member("list_sum", dyn, [dyn_list], lib.list_sum)]),
            cel.FunctionDecl("min", [member("list_min", dyn, [dyn_list], lib.list_min)]),
            cel.FunctionDecl("max", [member("list_max", dyn, [dyn_list], lib.list_max)]),
            cel.FunctionDecl("isSorted", [member("list_isSorted", cel.Type.BOOL, [dyn_list], lib.list_is_sorted)]),
            cel.FunctionDecl("indexOf", [member("list_indexOf", integer, [dyn_list, dyn], lib.list_index_of)]),
            cel.FunctionDecl(
                "lastIndexOf", [member("list_lastIndexOf", integer, [dyn_list, dyn], lib.list_last_index_of)]
            ),
            cel.FunctionDecl("find", [member("string_find", string, [string, string], lib.regex_find)]),
            cel.FunctionDecl("findAll", [
                member("string_findAll", cel.Type.List(string), [string, string], lib.regex_find_all),
                member("string_findAll_n", cel.Type.List(string), [string, string, integer], lib.regex_find_all),
            ]),
        ]
        def environment(variables: tuple[str, ...]) -> Any:
            # Our library goes last as an extension: list `indexOf` then merges with the strings extension's.
            return cel.NewEnv(
                variables=dict.fromkeys(variables, dyn),
                extensions=[
                    ext_optional.ExtOptional(), ext_strings.ExtStrings(), ext_bindings.ExtBindings(),
                    ext_math.ExtMath(), cel.CelExtension("kubernetes", functions),
                ],
            )

        # Expressions are checked against the variables Kubernetes defines, and run in an environment that
        # also holds PARAMS_TABLE, where every activation is made.
        self._env = environment(CEL_VARIABLES)
        self._run_env = environment((*CEL_VARIABLES, PARAMS_TABLE))

    shares_activation = True

    def _checked(self, expression: str) -> None:
        _check_length(expression)
        if (refusal := optional_maps_refusal(expression)) is not None:  # before cel-cpp's parser sees it
            raise CelCompileError(refusal)
        try:
            self._env.compile(expression)
        except Exception as exc:
            raise CelCompileError(str(exc).strip()) from exc

    def _program(self, source: str, text: str) -> _CppProgram:
        runnable = strict_conversions(without_lazy_optional_maps(without_lazy_binds(text)))
        try:
            return _CppProgram(source, self._run_env.compile(runnable), self._cel.Type.ERROR)
        except Exception as exc:
            raise CelCompileError(str(exc).strip()) from exc

    def compile(self, expression: str) -> CelProgram:
        self._checked(expression)
        return self._program(expression, expression)

    def compile_for_policy(self, expression: str, params_slot: str) -> CelProgram:
        self._checked(expression)
        if not uses_params(expression):
            return self._program(expression, expression)
        # `params` becomes a local of the expression, bound to this policy's entry of the table: the
        # expression means what it says, and one activation serves every policy. (As a one-element `map`,
        # not `cel.bind`: see policies/engines/cel_binds.py.)
        return self._program(expression, _with_params(expression, params_slot))

    def activation(self, variables: Mapping[str, Any]) -> Any:
        full = dict.fromkeys((*CEL_VARIABLES, PARAMS_TABLE))
        full.update(variables)
        return self._run_env.Activation(full)


# -- cel-python (celpy) ------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """celpy values -> plain Python (its types subclass the Python ones)."""
    from celpy import celtypes

    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.IntType | celtypes.UintType):
        return int(value)
    if isinstance(value, celtypes.DoubleType):
        return float(value)
    if isinstance(value, celtypes.StringType):
        return str(value)
    if isinstance(value, celtypes.MapType | dict):  # some operations (+) return plain Python containers
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, celtypes.ListType | list):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, celtypes.NullType):
        return None
    return value


class _PyProgram:
    def __init__(self, source: str, runner: Any) -> None:
        self.source = source
        self._runner = runner

    def evaluate(self, activation: Any) -> Any:
        import celpy

        try:
            value = self._runner.evaluate(activation)
        except Exception as exc:
            raise CelEvaluationError(str(exc)) from exc
        if isinstance(value, celpy.CELEvalError):
            raise CelEvaluationError(str(value.args[0] if value.args else value))
        return _plain(value)


class CelPythonEngine:
    """Pure-Python `cel-python`: slow, no optional syntax, but runs anywhere Python does."""

    name = "cel-python"
    shares_activation = False  # one activation per distinct params

    def __init__(self) -> None:
        import celpy

        self._celpy = celpy
        self._env = celpy.Environment()

        def adapt(fn: Callable[..., Any]) -> Callable[..., Any]:
            guarded = _guard(fn)

            def call(*args: Any) -> Any:
                try:
                    return celpy.json_to_cel(guarded(*(_plain(a) for a in args)))
                except lib.CelLibraryError as exc:
                    return celpy.CELEvalError(str(exc), type(exc), None)

            return call

        self._functions = {
            "quantity": adapt(lib.quantity), "isQuantity": adapt(lib.is_quantity),
            "sign": adapt(lib.quantity_sign), "isInteger": adapt(lib.quantity_is_integer),
            "asInteger": adapt(lib.quantity_as_integer), "asApproximateFloat": adapt(lib.quantity_as_float),
            "add": adapt(lib.quantity_add), "sub": adapt(lib.quantity_sub),
            "isLessThan": adapt(lib.quantity_less), "isGreaterThan": adapt(lib.quantity_greater),
            "compareTo": adapt(lib.quantity_compare),
            "sum": adapt(lib.list_sum), "min": adapt(lib.list_min), "max": adapt(lib.list_max),
            "isSorted": adapt(lib.list_is_sorted), "indexOf": adapt(lib.list_index_of),
            "lastIndexOf": adapt(lib.list_last_index_of),
            "find": adapt(lib.regex_find), "findAll": adapt(lib.regex_find_all),
        }

    def compile(self, expression: str) -> CelProgram:
        _check_length(expression)
        try:
            ast = self._env.compile(expression)
            runner = self._env.program(ast, functions=self._functions)
        except Exception as exc:
            raise CelCompileError(str(exc).strip()) from exc
        return _PyProgram(expression, runner)

    def compile_for_policy(self, expression: str, params_slot: str) -> CelProgram:
        return self.compile(expression)

    def activation(self, variables: Mapping[str, Any]) -> Any:
        full: dict[str, Any] = dict.fromkeys(CEL_VARIABLES)
        full.update(variables)
        return {name: self._celpy.json_to_cel(value) for name, value in full.items()}


_PARAMS_WORD = re.compile(r"\bparams\b")
_REQUEST_WORD = re.compile(r"\brequest\b")
# The AdmissionRequest fields other than the two objects: an expression that reads `request` only as
# `request.<one of these>` cannot tell a request without `object` and `oldObject` from the whole one.
REQUEST_FIELDS_BESIDE_OBJECTS = frozenset({
    "uid", "kind", "resource", "subResource", "requestKind", "requestResource", "requestSubResource", "name",
    "namespace", "operation", "userInfo", "dryRun", "options",
})
_REQUEST_FIELD = re.compile(r"\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)\b")


@functools.lru_cache(maxsize=4096)
def uses_params(expression: str) -> bool:
    """Whether the expression may read `params` (a cautious textual test: a false True only costs sharing)."""
    return _PARAMS_WORD.search(expression) is not None


@functools.lru_cache(maxsize=4096)
def reads_request_objects(expression: str) -> bool:
    """Whether the expression may read `request.object` or `request.oldObject` (or `request` as a whole).

    Cautious and textual: every `request` word must be followed by `.field` with a field of
    REQUEST_FIELDS_BESIDE_OBJECTS; anything else (`request.object`, `request["x"]`, `has(request.?o)`,
    `request.all(...)`, `cel.bind(r, request, ...)`, the word in a string or a comment) counts as True.
    The runtime then converts the pod once (`object`) instead of twice (`object`, `request.object`).
    """
    for found in _REQUEST_WORD.finditer(expression):
        field = _REQUEST_FIELD.match(expression, found.end())
        if field is None or field.group(1) not in REQUEST_FIELDS_BESIDE_OBJECTS:
            return True
    return False


def build_cel_engine(name: CelEngineName = "cel-expr-python") -> CelEngine:
    if name == "cel-expr-python":
        return CelExprPythonEngine()
    if name == "cel-python":
        return CelPythonEngine()
    raise ValueError(f"unknown CEL engine {name!r}")
