"""The budgets' refresh (webhook/spend/service.py `BudgetBook.refresh`, every `costs.cacheSeconds`) in one process
over the scale fleet (issue 36): its thread CPU, three times after the store's first snapshot.

    python bench/bench_budgets.py [--nodes 3000]      # prints JSON
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "bench"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench_memory import _api_objects  # noqa: E402

from webhook import assembly  # noqa: E402
from webhook.config import load_config  # noqa: E402
from webhook.spend.service import BudgetBook, SpendService  # noqa: E402


def measure(nodes: int) -> dict[str, object]:
    config = load_config(str(ROOT / "examples" / "config.yaml"))
    gc.disable()
    store = assembly.new_store(config)
    store.replace_all(_api_objects(nodes))
    store.mark_loaded()
    gc.enable()
    gc.collect()
    gc.freeze()
    store.snapshot(force=True)
    book = BudgetBook(SpendService(lambda: config, store.snapshot), lambda: config)
    cpu: list[float] = []
    states: dict[str, object] = {}
    for _ in range(3):
        started = time.thread_time()
        states = dict(book.refresh())
        cpu.append(round(time.thread_time() - started, 4))
    return {"nodes": nodes, "pods": len(store.objects("Pod")), "tenants_budgeted": len(states), "refresh_cpu_s": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3000)
    print(json.dumps(measure(parser.parse_args().nodes), indent=1))


if __name__ == "__main__":
    main()
