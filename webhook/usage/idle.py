"""Idle GPUs (pure; SPEC section 11): pods that hold GPUs now and whose GPUs all stayed below
`rightsizing.idleBelow` engine activity in every window of the last `rightsizing.idleFor`.

A pod counts only when its history covers the whole stretch (a pod started ten minutes ago is not idle
for an hour) and every window of it has an activity value (no value is not "idle", it is unknown).
"""

from __future__ import annotations

from dataclasses import dataclass

from webhook.config import Rightsizing
from webhook.usage.history import PodHistory


@dataclass(frozen=True)
class IdlePod:
    pod: PodHistory
    idle_seconds: float  # how long back from the newest window every window stayed below the threshold
    highest: float  # the highest activity in that stretch


def idle_pod(pod: PodHistory, settings: Rightsizing, newest: float, step: float) -> IdlePod | None:
    """The pod as idle, or None when it is not (or not known to be)."""
    needed = settings.idle_for_seconds
    if needed > 0 and newest in pod.memory and not pod.activity.get(newest, settings.idle_below) < settings.idle_below:
        return None  # busy (or unknown) in the newest window, which the stretch holds: most pods stop here
    if pod.last is None or pod.last < newest:
        return None  # no longer holds GPUs
    # Covered from the start of the stretch: its first window ends at most one window after it begins.
    if min(pod.memory) > newest - needed + step + 1e-6:
        return None
    windows = sorted((t for t in pod.memory if t > newest - needed), reverse=True)
    expected = max(1, round(needed / step))
    if len(windows) < expected:
        return None  # gaps: not seen all the time
    highest = 0.0
    for moment in windows:
        value = pod.activity.get(moment)
        if value is None or value >= settings.idle_below:
            return None
        highest = max(highest, value)
    # How long it has been idle, further back than asked (for the report).
    stretch = len(windows)
    for moment in sorted((t for t in pod.memory if t <= newest - needed), reverse=True):
        value = pod.activity.get(moment)
        if value is None or value >= settings.idle_below or moment != newest - stretch * step:
            break
        highest = max(highest, value)
        stretch += 1
    return IdlePod(pod, stretch * step, highest)
