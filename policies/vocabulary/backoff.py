"""Exponential backoff with jitter, for retries against the Kubernetes API.

One policy for the agent's publishing loop and the webhook's watches (pure arithmetic, no I/O, so it
lives with the shared vocabulary): `base`, `factor` x base, `factor`^2 x base ... capped at `cap`, each
delay scaled down by a random share of at most `jitter` so that a fleet does not retry in step.
"""

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
    attempts: int = 0

    def next_delay(self) -> float:
        delay = min(self.cap, self.base * self.factor ** min(self.attempts, 64))
        self.attempts += 1
        return delay * (1 - self.jitter * self.rng.random())

    def reset(self) -> None:
        self.attempts = 0
