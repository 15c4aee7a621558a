"""Loading a policy set: compiled unit by unit, validated, prepared on the engine and swapped in whole;
the previous set keeps serving when the new one is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from policies.api import PolicyStatus, ReloadReport
from policies.engines.health import UnreachablePrepared
from policies.engines.rego import RegoCompileError, RegoEngineUnavailable
from policies.kernel.metrics import POLICY_LOAD_ERRORS
from policies.loading.gpupolicy import PolicyCompileError
from policies.loading.loader import PolicySource, collect_sources
from policies.loading.policy_set import (
    CompiledUnit,
    PolicySet,
    compile_unit,
    duplicate_packages,
    gathered_policies,
    input_reads,
    prepare_rego,
    previous_units,
)
from policies.runtime.base import RuntimeBase

log = logging.getLogger("kgwe.policies")

SET_ERROR_KEY = "<policy set>"


class Reloading(RuntimeBase):
    def reload(
        self, *, builtin: bool = True, directories: Iterable[str] = (), gpu_policies: Iterable[Mapping[str, Any]] = ()
    ) -> ReloadReport:
        """Compile a new set; never raises for a bad policy (see ReloadReport)."""
        from pathlib import Path

        with self._reload_lock:
            sources = collect_sources(
                builtin_dir=Path(self._builtin_dir) if builtin else None,
                directories=list(directories),
                gpu_policies=list(gpu_policies),
            )
            return self._reload(sources)

    def _reload(self, sources: list[PolicySource]) -> ReloadReport:
        report = ReloadReport()
        previous = previous_units(self._set)
        errors: dict[tuple[str, str], str] = {}
        repeated: set[tuple[str, str]] = set()
        libraries: list[CompiledUnit] = []
        chosen: list[CompiledUnit] = []
        # Libraries first, so that policies are validated against the libraries they import.
        ordered = sorted(sources, key=lambda s: s.is_policy)
        compiled: dict[tuple[str, str], CompiledUnit] = {}
        for source in ordered:
            key: tuple[str, str] = (source.kind, source.name)
            old = previous.get(key)
            known_failure = self._failed.get(key)
            if old is not None and old.source.fingerprint == source.fingerprint and not source.error:
                unit = old
            elif known_failure is not None and known_failure[0] == source.fingerprint:
                # The same broken version again (a directory poll, a resync): no recompile, no new count.
                errors[key] = known_failure[1]
                repeated.add(key)
                if old is None:
                    continue
                unit = old
                report.kept_previous.append(source.name)
            else:
                try:
                    unit = compile_unit(source, lambda: self.cel_engine, self._validator, libraries)
                except PolicyCompileError as exc:
                    errors[key] = str(exc)
                    self._failed[key] = (source.fingerprint, str(exc))
                    if old is None:
                        continue
                    unit = old
                    report.kept_previous.append(source.name)
            compiled[key] = unit
            if not source.is_policy:
                libraries.append(unit)
        chosen = [compiled[(s.kind, s.name)] for s in sources if (s.kind, s.name) in compiled]
        for name, reason in duplicate_packages(chosen).items():
            errors[next(k for k in compiled if k[1] == name)] = reason
            chosen = [u for u in chosen if u.name != name]
        self._failed = {k: v for k, v in self._failed.items() if k in errors}
        if [id(u) for u in chosen] == [id(u) for u in self._set.units]:
            # Nothing changed: keep the prepared set (no recompilation, no re-push to an OPA server).
            report.loaded = [u.name for u in chosen]
            self._record(report, errors, sources, served=self._set, repeated=repeated)
            return report
        try:
            prepared, gathered = prepare_rego(self._rego_engine, chosen)
            self.engine_health.mark_up()
        except RegoEngineUnavailable as exc:
            # The engine is unreachable, not refusing: serve the new set anyway. CEL runs as usual, the Rego
            # part answers per failureMode until the reconnect loop has loaded it on the engine.
            prepared, gathered = UnreachablePrepared(self._rego_engine.name, str(exc)), gathered_policies(chosen)
            self.engine_health.mark_down(str(exc))
        except RegoCompileError as exc:
            # Policies that compile alone but not together (or an engine that refused the set): keep serving
            # the last good set, and blame every unit that changed since.
            changed: list[tuple[str, str]] = [
                (s.kind, s.name) for s in sources
                if (s.kind, s.name) not in previous or previous[(s.kind, s.name)].source.fingerprint != s.fingerprint
            ]
            fingerprints = {(s.kind, s.name): s.fingerprint for s in sources}
            for key in changed or [("set", SET_ERROR_KEY)]:
                errors.setdefault(key, f"the policy set did not compile: {exc}")
                if key in fingerprints:
                    self._failed[key] = (fingerprints[key], errors[key])
            self._rollback_engine()
            self._record(report, errors, sources, served=self._set, repeated=repeated)
            return report
        self._set = PolicySet(
            units=chosen,
            prepared=prepared,
            gathered=gathered,
            has_check=any(g.rules & {"deny", "warn"} for g in gathered),
            has_decision=any("decision" in g.rules for g in gathered),
            reads=input_reads(chosen),
        )
        report.loaded = [u.name for u in chosen]
        self._record(report, errors, sources, served=self._set, repeated=repeated)
        return report

    def _reconnect(self) -> None:
        """Load the serving set on the engine again (the reconnect loop calls this); raises
        RegoEngineUnavailable while the engine cannot be reached."""
        with self._reload_lock:
            current = self._set
            prepared, gathered = prepare_rego(self._rego_engine, current.units)
            self._set = PolicySet(
                units=current.units, prepared=prepared, gathered=gathered,
                has_check=current.has_check, has_decision=current.has_decision, reads=current.reads,
            )

    def engine_problems(self) -> list[str]:
        """For `/readyz`: the Rego engine's current problem, if any."""
        return self.engine_health.problems()

    def close(self) -> None:
        """Stop the reconnect loop (a runtime being replaced or shut down)."""
        self.engine_health.close()

    def _rollback_engine(self) -> None:
        # A server may hold part of the refused set: push the serving set back.
        push = getattr(self._set.prepared, "push", None)
        if push is not None:
            try:
                push()
            except RegoCompileError as exc:
                log.error("could not restore the serving policy set on the OPA server: %s", exc)

    def _record(
        self, report: ReloadReport, errors: dict[tuple[str, str], str], sources: list[PolicySource],
        served: PolicySet, repeated: set[tuple[str, str]],
    ) -> None:
        serving = {(u.source.kind, u.name) for u in served.units}
        statuses: dict[tuple[str, str], PolicyStatus] = {}
        for source in sources:
            key: tuple[str, str] = (source.kind, source.name)
            statuses[key] = PolicyStatus(
                name=source.name, source=source.location, loaded=key in serving, error=errors.get(key),
                kind=source.kind,
            )
        for key, reason in errors.items():
            report.errors[key[1]] = reason
            if key not in repeated:
                POLICY_LOAD_ERRORS.labels(key[1]).inc()
                log.error("policy %s refused: %s", key[1], reason)
        self._statuses = statuses

    def status(self) -> list[PolicyStatus]:
        return list(self._statuses.values())

    def policy_names(self) -> list[str]:
        return [u.name for u in self._set.units if u.source.is_policy]

