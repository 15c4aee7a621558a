"""Keep the policy set in step with the GPUPolicy objects of the cluster model, without a restart.

Polls the store's snapshot; when the GPUPolicy objects (or the configured directories' files) change,
recompiles through the policy runtime, which keeps the last good version of a policy that no longer
compiles. In a cluster the outcome is written back as a `Ready` condition on each GPUPolicy's status.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from policies.kernel.background import Task
from policies.vocabulary.objects import ObjectView
from webhook.runtime import Runtime

log = logging.getLogger("kgwe.policy_sync")
StatusWriter = Callable[[str, dict[str, Any]], None]


def _fingerprint(runtime: Runtime) -> str:
    model = runtime.store.snapshot()
    digest = hashlib.sha256()
    for name in sorted(model.gpu_policies):
        obj = model.gpu_policies[name]
        digest.update(
            orjson.dumps(
                {"n": name, "spec": obj.get("spec"), "g": ObjectView(obj).generation},
                option=orjson.OPT_SORT_KEYS,
            )
        )
    for directory in runtime.config.policies.directories:
        for path in sorted(Path(directory).rglob("*")):
            if path.is_file():
                stat = path.stat()
                digest.update(f"{path}:{stat.st_mtime_ns}:{stat.st_size}".encode())
    return digest.hexdigest()


def condition_for(name: str, statuses: list[Any]) -> dict[str, Any]:
    """The `Ready` condition of one GPUPolicy from the policy runtime's status list."""
    status = next((s for s in statuses if s.name == name or s.source == f"GPUPolicy/{name}"), None)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if status is None:
        return {"type": "Ready", "status": "Unknown", "reason": "NotLoaded", "message": "", "lastTransitionTime": now}
    if status.error:
        reason = "CompileErrorLastGoodServing" if status.loaded else "CompileError"
        return {
            "type": "Ready",
            "status": "False",
            "reason": reason,
            "message": status.error[:1024],
            "lastTransitionTime": now,
        }
    return {"type": "Ready", "status": "True", "reason": "Compiled", "message": "", "lastTransitionTime": now}


class PolicySync:
    """The `policy-sync` task of `kgwe serve` (`task`): every `interval` seconds, `sync_once`."""

    def __init__(self, runtime: Runtime, interval: float = 2.0, write_status: StatusWriter | None = None) -> None:
        self.runtime = runtime
        self.interval = interval
        self.write_status = write_status
        self._last = ""
        self._primed = False
        # The first run, at start, only takes the fingerprint: build_runtime compiled this set already.
        self.task = Task("policy-sync", self._tick, interval=interval, run_at_start=True,
                         on_error=lambda _exc: log.exception("policy sync failed; the current set keeps serving"))

    def _tick(self) -> None:
        if not self._primed:
            self._last = _fingerprint(self.runtime)
            self._primed = True
            return
        self.sync_once()

    def sync_once(self) -> bool:
        """Reload when something changed; True when a reload happened."""
        policies = self.runtime.policies
        if policies is None:
            return False
        fingerprint = _fingerprint(self.runtime)
        if fingerprint == self._last:
            return False
        self._last = fingerprint
        model = self.runtime.store.snapshot()
        config = self.runtime.config.policies
        report = policies.reload(
            builtin=config.builtin, directories=list(config.directories), gpu_policies=list(model.gpu_policies.values())
        )
        for name, error in report.errors.items():
            log.error(
                "policy %s refused (last good version %s): %s",
                name,
                "keeps serving" if name in report.kept_previous else "none",
                error,
            )
        if self.write_status is not None:
            statuses = policies.status()
            for name in model.gpu_policies:
                try:
                    self.write_status(name, condition_for(name, statuses))
                except Exception as exc:  # a status write must never stop policy serving
                    log.warning("GPUPolicy %s: status not written: %s", name, exc)
        return True
