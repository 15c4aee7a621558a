"""Events on pods about KGWE's decisions: `KGWEPlaced` (Normal) when `/mutate` changed a pod's placement,
`KGWERefused` (Warning) when `/validate` refused it; the message says why (webhook/explain.py's summary:
where it goes, which candidate types were dropped and by what, which policies decided).

Written off the request path: the endpoint only puts a small record on a bounded queue (a full queue
drops the record and counts it in `kgwe_pod_events_dropped_total`: an Event is never worth slowing or
failing an admission), and one thread writes them to the API server. Never for dryRun requests (the
pod will not exist), never for workload templates, UPDATEs or non-pods, never in YAML mode (no API).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter

from policies.kernel.background import Task
from policies.vocabulary.backoff import Backoff
from webhook.admission.outcome import Outcome
from webhook.admission.request import AdmissionRequest
from webhook.placement.trace import TraceStep

log = logging.getLogger("kgwe.server.pod_events")

WRITTEN = Counter("kgwe_pod_events_total", "Events written on pods about KGWE decisions", ["reason"])
DROPPED = Counter("kgwe_pod_events_dropped_total", "Decision Events not written (queue full or API error)")

REASON_PLACED = "KGWEPlaced"
REASON_REFUSED = "KGWERefused"
MESSAGE_LIMIT = 1024  # the API server's limit for an Event's message

EventWrite = Callable[[dict[str, Any], str, str, str], None]  # (pod, reason, message, type)


@dataclass(frozen=True)
class _Record:
    pod: dict[str, Any]  # metadata only: namespace, name, uid
    reason: str
    message: str
    kind: str


def placement_summary(plan: Any) -> str:
    """One line from a placement plan: where the pod goes and what each step dropped."""
    parts: list[str] = []
    types = ", ".join(getattr(plan, "types", [])[:8]) or "no type"
    sharing = getattr(plan, "sharing", "exclusive")
    profile = getattr(plan, "mig_profile", None)
    parts.append(f"placed on {types} ({sharing}{' ' + profile if profile else ''})")
    trace: list[TraceStep] = list(getattr(plan, "trace", []))
    for step in trace:
        if step.dropped:
            dropped = ", ".join(f"{t}: {why}" for t, why in step.dropped[:8])
            parts.append(f"{step.step} dropped {dropped}")
    decided = getattr(plan, "decided_by", {}) or {}
    by_policy: dict[str, list[str]] = {}
    for name, policy in decided.items():
        by_policy.setdefault(policy, []).append(name)
    parts.extend(f"{policy} decided {', '.join(sorted(names))}" for policy, names in by_policy.items())
    return _bounded("; ".join(parts))


def _bounded(text: str) -> str:
    text = " ".join(text.split())  # one line
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


class DecisionEvents:
    """The queue and its writer, the `pod-events` task (a watch on the queue). `offer` is cheap and never
    raises; `start`/`stop` run the task alone (`kgwe serve` hands `task` to its supervisor)."""

    def __init__(self, write: EventWrite, capacity: int = 256) -> None:
        self._write = write
        self._queue: queue.Queue[_Record | None] = queue.Queue(maxsize=capacity)
        self._abandon = threading.Event()
        # The writer never raises (a failed write is counted and dropped); the backoff only guards a surprise.
        self.task = Task("pod-events", self._run, interval=0, backoff=Backoff(base=1.0, cap=30.0),
                         interrupt=self._interrupt)

    def offer(self, request: AdmissionRequest, outcome: Outcome, mutating: bool) -> None:
        """Called by the admission endpoints after answering."""
        try:
            record = self._record(request, outcome, mutating)
            if record is not None:
                self._queue.put_nowait(record)
        except queue.Full:
            DROPPED.inc()
        except Exception:  # an Event must never break an admission answer
            log.exception("decision event for uid=%s not queued", request.uid)
            DROPPED.inc()

    @staticmethod
    def _record(request: AdmissionRequest, outcome: Outcome, mutating: bool) -> _Record | None:
        if request.dry_run or not request.is_pod or request.operation != "CREATE" or request.template:
            return None
        name = request.pod.name or request.name
        if not name:
            return None  # the pod has no name yet: no Event can point at it
        pod = {"metadata": {"namespace": request.namespace, "name": name, "uid": request.pod.uid or None}}
        if mutating and outcome.allowed and outcome.patch:
            plan = getattr(outcome, "plan", None)
            if plan is None or not getattr(plan, "gpu_pod", False):
                return None
            return _Record(pod, REASON_PLACED, placement_summary(plan), "Normal")
        if not mutating and not outcome.allowed:
            return _Record(pod, REASON_REFUSED, _bounded(f"refused by KGWE: {outcome.message}"), "Warning")
        return None

    def start(self) -> None:
        self._abandon.clear()
        self.task.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.task.stop(timeout)

    def _interrupt(self) -> None:
        # Behind the records queued so far, which are written first (within the stop's bound); with the queue
        # full, the writer stops after the record in hand and the rest is lost with the process.
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            self._abandon.set()

    def _run(self) -> None:
        while not self._abandon.is_set():
            record = self._queue.get()
            if record is None:
                return
            try:
                self._write(record.pod, record.reason, record.message, record.kind)
                WRITTEN.labels(record.reason).inc()
            except Exception as exc:  # the API server is down or refuses: the Event is lost, admission is not
                DROPPED.inc()
                log.warning("Event %s on pod %s/%s not written: %s", record.reason,
                            record.pod["metadata"]["namespace"], record.pod["metadata"]["name"], exc)
