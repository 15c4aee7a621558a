"""What compiling one unit's Rego on its own concluded, remembered by exactly what was compiled.

Every unit is compiled with the libraries it may import before it joins a set (policy_set.compile_unit), so
that an error names it. On regorus, which runs in this process, the verdict is a function of the modules,
the data and the warm-up input alone: a process that builds a runtime again from the same sources (the test
suite built 640 runtimes, each compiling the nine shipped units again: about 45 of its CPU-seconds; a bench
that builds one per case) takes the verdict it reached the first time. A remote engine's verdict is not kept:
the server is another party, and may be a different one next time.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import orjson

# Verdicts are 32-byte keys and a message: a few hundred cost nothing, and cover every unit a process
# builds again (a runtime holds tens).
KEPT = 512
COMPILES = ""


class RegoVerdicts:
    """Compiling a set of modules on the in-process engine: COMPILES, or the error it raised."""

    def __init__(self, size: int = KEPT) -> None:
        self._size = size
        self._known: OrderedDict[bytes, str] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(engine: str, modules: Mapping[str, str], data: Mapping[str, Any], probe: Any) -> bytes:
        # repr for what JSON cannot say (a GPUPolicy's parameters come from YAML: dates, for one): the same
        # value gives the same text, which is all a key needs.
        text = orjson.dumps([engine, sorted(modules.items()), data, probe], default=repr,
                            option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
        return hashlib.sha256(text).digest()

    def get(self, key: bytes) -> str | None:
        with self._lock:
            verdict = self._known.get(key)
            if verdict is not None:
                self._known.move_to_end(key)
            return verdict

    def put(self, key: bytes, verdict: str) -> None:
        with self._lock:
            self._known[key] = verdict
            while len(self._known) > self._size:
                self._known.popitem(last=False)


VERDICTS = RegoVerdicts()
