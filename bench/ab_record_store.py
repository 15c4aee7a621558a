"""A paired A/B of the kernel record store's write base: what one gang ledger round costs (read, then write).

The round is the gang controller's (webhook/gangs/controller.py): read the GangLedger, decode its records,
encode them again and replace the object at the version read, against the fake API server of the tests
(tests/gangs/gang_support.py: real HTTP, the ledger's resourceVersion checked), with `--records` records
(the ledger's bound is 2000). A: the write's base is a whole deep copy of the object read (as the store
first did). B: the store's own base, a copy of the object's metadata only (the codec replaces the fields it
owns). The two take turns round by round, so a busy moment of the machine falls on both alike; the medians
and their ratio are printed as JSON.

Run: `.venv/bin/python bench/ab_record_store.py [--records 2000] [--rounds 20]`.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
for _path in (_ROOT, _ROOT / "tests" / "cluster", _ROOT / "tests" / "gangs"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from gang_support import GangApiServer  # noqa: E402
from kubernetes import client as k8s_client  # noqa: E402

from policies.kernel.records import Codec, ObjectPlace, RecordStore  # noqa: E402
from webhook.cluster.kube_json import KubeJson  # noqa: E402
from webhook.gangs.ledger import (  # noqa: E402
    GROUP,
    KIND,
    LEDGER_NAME,
    PLURAL,
    VERSION,
    GangRecord,
    Records,
    records_from_json,
    records_to_json,
)

PLACE = ObjectPlace(f"/apis/{GROUP}/{VERSION}/{PLURAL}", LEDGER_NAME, f"{GROUP}/{VERSION}", KIND)


def _decode(obj: dict[str, Any] | None) -> Records:
    return records_from_json(((obj or {}).get("spec") or {}).get("gangs"))


def _encode(records: Records, obj: dict[str, Any]) -> dict[str, Any]:
    obj["spec"] = {"gangs": records_to_json(records)}
    return obj


class WholeCopy(RecordStore[Records]):
    """A: the object read, deep-copied whole, as the write's base."""

    def _base(self, version: str) -> dict[str, Any]:
        base = super()._base(version)
        return copy.deepcopy(base)


def _round(store: RecordStore[Records]) -> float:
    started = time.perf_counter()
    found = store.read()
    store.write(found.value, found.version)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    server = GangApiServer().start()
    configuration = k8s_client.Configuration()
    configuration.host = server.url
    try:
        with k8s_client.ApiClient(configuration) as client:
            api = KubeJson(client)
            codec = Codec(_decode, _encode)
            whole, metadata = WholeCopy(api, PLACE, codec), RecordStore(api, PLACE, codec)
            records = {f"ml/g{i}": GangRecord("ml", f"g{i}", 4, 2, ("nvidia-h100-80gb",), None, 1.79e9 + i)
                       for i in range(args.records)}
            metadata.write(records, "")
            times: dict[str, list[float]] = {"whole": [], "metadata": []}
            for index in range(args.rounds + 1):
                pair = [("whole", whole), ("metadata", metadata)]
                for name, store in pair if index % 2 else reversed(pair):
                    seconds = _round(store)
                    if index:  # the first pair warms both up
                        times[name].append(seconds)
    finally:
        server.close()
    a, b = statistics.median(times["whole"]), statistics.median(times["metadata"])
    print(json.dumps({"records": args.records, "rounds": args.rounds, "whole_copy_ms": round(a * 1000, 1),
                      "metadata_copy_ms": round(b * 1000, 1), "ratio": round(b / a, 2)}))


if __name__ == "__main__":
    main()
