"""Compiling policy sources into one immutable, servable `PolicySet`.

Each new or changed unit is first compiled on its own (CEL programs, and its Rego modules with the
library modules and a one-policy aggregate), so an error names the unit that caused it. Units that
fail fall back to their last good version when there is one. The surviving set is then prepared
once on the serving engine, with a warm-up query so that no request pays for lazy compilation.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from policies.engines.aggregate import (
    AGGREGATE_MODULE,
    CHECK_QUERY,
    DECISION_QUERY,
    GatheredPolicy,
    aggregate_module,
    has_decisions,
)
from policies.engines.cel import CelEngine, reads_request_objects, uses_params
from policies.engines.cel_reads import cel_reads
from policies.engines.projection import Projection, projection_of
from policies.engines.rego import (
    PreparedRego,
    RegoCompileError,
    RegoEngine,
    RegoEngineUnavailable,
    RegoEngineUnreachable,
    RegoEvaluationError,
    RegoInput,
    RegorusEngine,
)
from policies.engines.rego_reads import InputReads
from policies.loading.gpupolicy import (
    MATCH_READS,
    CompiledGPUPolicy,
    PolicyCompileError,
    compile_gpu_policy,
)
from policies.loading.loader import PolicySource
from policies.loading.rego_verdicts import COMPILES, VERDICTS

# A pod that exercises the common paths of GPU policies during the warm-up query.
WARMUP_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "warmup", "namespace": "default", "labels": {}, "annotations": {}},
    "spec": {
        "containers": [
            {"name": "main", "image": "cuda", "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "1Gi"}},
             "securityContext": {}},
        ],
    },
}


def warmup_input(active: Iterable[str] = ()) -> RegoInput:
    return RegoInput({
        "request": {"uid": "warmup", "operation": "CREATE", "namespace": "default", "object": WARMUP_POD,
                    "userInfo": {"username": "warmup", "groups": []}},
        "namespaceObject": {"metadata": {"name": "default", "labels": {}}},
        "intent": {"gpus": 1},
        "tenant": None,
        "kgwe": {"active": dict.fromkeys(active, True)},
        "params": {},
    })


@dataclass(frozen=True)
class CompiledUnit:
    source: PolicySource
    gpu_policy: CompiledGPUPolicy | None

    @property
    def name(self) -> str:
        return self.source.name

    def gathered(self) -> GatheredPolicy | None:
        if not self.source.is_policy or not self.source.rules:
            return None
        infos = self.source.infos
        return GatheredPolicy(self.name, infos[0].package, self.source.rules, gated=self.gpu_policy is not None)


@dataclass
class PolicySet:
    units: list[CompiledUnit]
    prepared: PreparedRego | None
    gathered: list[GatheredPolicy] = field(default_factory=list)
    has_check: bool = False
    has_decision: bool = False
    # What the set's Rego can read of the input (policies/engines/rego_reads.py); None: all of it.
    reads: InputReads | None = None

    @functools.cached_property
    def gpu_policies(self) -> list[CompiledGPUPolicy]:
        return [u.gpu_policy for u in self.units if u.gpu_policy is not None]

    @functools.cached_property
    def cel_reads_request_objects(self) -> bool:
        """Whether any CEL expression of the set may read the objects through `request` (see
        `reads_request_objects`); when none does, the `request` variable is given without them."""
        return any(reads_request_objects(program.source) for policy in self.gpu_policies
                   for program in policy.cel_programs())

    @functools.cached_property
    def cel_read_paths(self) -> frozenset[tuple[str, ...]]:
        """What the set's CEL expressions can read of the runtime's document (policies/engines/cel_reads.py)."""
        return frozenset(path for policy in self.gpu_policies for program in policy.cel_programs()
                         for path in cel_reads(program.source))

    @functools.cached_property
    def cel_projection(self) -> Projection | None:
        """The part of the request and namespace object the runtime converts for CEL; None: all of it."""
        return projection_of(self.cel_read_paths)

    @functools.cached_property
    def request_reads(self) -> frozenset[tuple[str, ...]]:
        """What the GPUPolicies' match rules and CEL expressions can read of the runtime's document; their
        Rego is in `reads`."""
        if not self.gpu_policies:
            return frozenset()
        return MATCH_READS | self.cel_read_paths

    @functools.cached_property
    def cel_values_keys(self) -> dict[int, tuple[str, bytes]]:
        """By program (its id: the set holds every program), what its value is remembered under in a
        request: one expression over one request (and one params, where it reads them) has one value,
        however many policies state it."""
        return {id(program): (program.source, policy.params_key if uses_params(program.source) else b"")
                for policy in self.gpu_policies for program in policy.cel_programs()}

    def close(self) -> None:
        if self.prepared is not None:
            self.prepared.close()


def _modules(units: Iterable[CompiledUnit]) -> dict[str, str]:
    modules: dict[str, str] = {}
    for unit in units:
        modules.update(unit.source.modules)
    return modules


def _params(units: Iterable[CompiledUnit]) -> dict[str, Any]:
    return {u.name: u.gpu_policy.params for u in units if u.gpu_policy is not None}


def input_reads(units: Iterable[CompiledUnit]) -> InputReads:
    """The input reads of the units' Rego modules; a unit without rules (a library) runs only where a
    policy references it."""
    units = list(units)
    return InputReads.of_sources({u.name: u.source.modules for u in units if u.source.modules},
                                 libraries=[u.name for u in units if u.gathered() is None])


def gathered_policies(units: Iterable[CompiledUnit]) -> list[GatheredPolicy]:
    return [g for g in (u.gathered() for u in units) if g is not None]


@dataclass(frozen=True)
class _RegoInputs:
    """What preparing units compiles and asks: the modules with the aggregate (none: nothing to prepare),
    the data, the warm-up input, and whether the decision query is asked too."""

    gathered: list[GatheredPolicy]
    modules: dict[str, str]
    data: dict[str, Any]
    probe: RegoInput
    decisions: bool


def _rego_inputs(units: list[CompiledUnit]) -> _RegoInputs:
    gathered = gathered_policies(units)
    modules = _modules(units)
    if modules:
        modules[AGGREGATE_MODULE] = aggregate_module(gathered)
    return _RegoInputs(gathered, modules, {"kgwe": {"params": _params(units), "cluster": {}}},
                       warmup_input(g.name for g in gathered if g.gated), has_decisions(gathered))


def prepare_rego(engine: RegoEngine, units: list[CompiledUnit]) -> tuple[PreparedRego | None, list[GatheredPolicy]]:
    """Compile the units' modules plus the aggregate on `engine` and warm it up; raises RegoCompileError
    (RegoEngineUnavailable when the engine could not be reached at all)."""
    inputs = _rego_inputs(units)
    if not inputs.modules:
        return None, inputs.gathered
    prepared = engine.prepare(inputs.modules, inputs.data)
    try:
        prepared.query(CHECK_QUERY, inputs.probe)
        if inputs.decisions:
            prepared.query(DECISION_QUERY, inputs.probe)
    except RegoEngineUnreachable as exc:
        prepared.close()
        raise RegoEngineUnavailable(str(exc)) from exc
    except RegoEvaluationError as exc:
        prepared.close()
        raise RegoCompileError(str(exc)) from exc
    return prepared, inputs.gathered


def _validate_rego(validator: RegoEngine, units: list[CompiledUnit]) -> None:
    """Compile `units` on the validator and drop the result; raises PolicyCompileError. regorus' verdicts
    are remembered (rego_verdicts.py)."""
    key = None
    if type(validator) is RegorusEngine:
        inputs = _rego_inputs(units)
        key = VERDICTS.key(validator.name, inputs.modules, inputs.data, [inputs.probe.document, inputs.decisions])
        verdict = VERDICTS.get(key)
        if verdict == COMPILES:
            return
        if verdict is not None:
            raise PolicyCompileError(verdict)
    try:
        prepared, _ = prepare_rego(validator, units)
    except RegoCompileError as exc:
        if key is not None and not isinstance(exc, RegoEngineUnavailable):
            VERDICTS.put(key, f"rego: {exc}")
        raise PolicyCompileError(f"rego: {exc}") from exc
    if prepared is not None:
        prepared.close()
    if key is not None:
        VERDICTS.put(key, COMPILES)


def compile_unit(
    source: PolicySource, cel: Callable[[], CelEngine], validator: RegoEngine, libraries: list[CompiledUnit]
) -> CompiledUnit:
    """Compile one unit on its own; raises PolicyCompileError naming what is wrong. `cel` is called only for
    a GPUPolicy: building the CEL engine loads protobuf and CEL's environment, which a set of Rego alone (the
    built-ins of a one-shot `kgwe review`) never uses."""
    if source.error:
        raise PolicyCompileError(source.error)
    gpu = None
    if source.gpu_policy is not None:
        gpu = compile_gpu_policy(source.gpu_policy, cel())
    unit = CompiledUnit(source, gpu)
    if source.modules:
        _validate_rego(validator, [*libraries, unit])
    return unit


def duplicate_packages(units: Iterable[CompiledUnit]) -> dict[str, str]:
    """Two policies in one package would merge their rules: the later one is refused."""
    owner: dict[str, str] = {}
    refused: dict[str, str] = {}
    for unit in units:
        for info in unit.source.infos:
            first = owner.setdefault(info.package, unit.name)
            if first != unit.name:
                refused[unit.name] = f"package {info.package} is already used by policy {first}"
    return refused


def previous_units(previous: PolicySet | None) -> Mapping[tuple[str, str], CompiledUnit]:
    if previous is None:
        return {}
    return {(u.source.kind, u.name): u for u in previous.units}
