"""Exponential backoff with jitter, for retries against the Kubernetes API."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    base: float = 1.0
    cap: float = 300.0
    factor: float = 2.0
    # Up to this share of each delay is random, so that a fleet of agents does not retry in step.
    jitter: float = 0.2
    rng: random.Random = field(default_factory=random.Random)
    failures: int = 0

    def next_delay(self) -> float:
        delay = min(self.cap, self.base * self.factor ** min(self.failures, 64))
        self.failures += 1
        return delay * (1 - self.jitter * self.rng.random())

    def reset(self) -> None:
        self.failures = 0
