"""One CEL evaluation for many expressions of a request.

Crossing into cel-cpp and back costs a few microseconds per evaluation, as much as a simple
expression's own work; twenty policies' match conditions and validations are two crossings instead of
dozens when the engine joins them into one program whose value is the list of theirs
(`CelEngine.batch`). Joined programs are compiled once per set of expressions and remembered, a bounded
number per policy set.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from policies.engines.cel import CelEngine, CelProgram

# Distinct sets of expressions joined per policy set. Which policies a request activates depends on its
# pod (selectors, match conditions), so a pod creator can ask for new sets at will, and joining one costs
# milliseconds (about 5 ms for 40 expressions here): a policy set compiles at most this many over its
# life. Sets met after that, and never before, run one expression at a time, as without joining.
MAX_JOINED = 256


class JoinedPrograms:
    """The programs `engine.batch` joined for one policy set, by the exact tuple of programs joined."""

    def __init__(self, engine: CelEngine, limit: int = MAX_JOINED) -> None:
        self._engine = engine
        self._limit = limit
        self._joined: dict[tuple[CelProgram, ...], CelProgram | None] = {}
        self._lock = threading.Lock()

    def get(self, programs: Sequence[CelProgram]) -> CelProgram | None:
        """The joined program, or None when the engine cannot join these or the budget is spent."""
        key = tuple(programs)
        try:
            return self._joined[key]
        except KeyError:
            pass
        with self._lock:
            if key in self._joined:
                return self._joined[key]
            if len(self._joined) >= self._limit:
                return None
            # Compiled under the lock: two threads meeting the same new set compile it once, and the
            # budget holds exactly.
            joined = self._engine.batch(key)
            self._joined[key] = joined
            return joined


__all__ = ["MAX_JOINED", "JoinedPrograms"]
