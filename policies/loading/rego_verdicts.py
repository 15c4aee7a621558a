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
from collections.abc import Mapping
from typing import Any

import orjson

from policies.kernel.kept import Kept

# Verdicts are 32-byte keys and a message: a few hundred cost nothing, and cover every unit a process
# builds again (a runtime holds tens).
KEPT = 512
COMPILES = ""


class RegoVerdicts(Kept[bytes, str]):
    """Compiling a set of modules on the in-process engine: COMPILES, or the error it raised."""

    def __init__(self, size: int = KEPT) -> None:
        super().__init__(size)

    @staticmethod
    def key(engine: str, modules: Mapping[str, str], data: Mapping[str, Any], probe: Any) -> bytes:
        # repr for what JSON cannot say (a GPUPolicy's parameters come from YAML: dates, for one): the same
        # value gives the same text, which is all a key needs.
        text = orjson.dumps([engine, sorted(modules.items()), data, probe], default=repr,
                            option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
        return hashlib.sha256(text).digest()


VERDICTS = RegoVerdicts()
