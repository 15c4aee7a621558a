"""One unit per number in the node view (issue 35, item 5): every GPU resource of a node carries its unit
(GPU, MPS replica, MIG slice of a profile), only numbers of one unit add up, and the one figure that orders
nodes by what is free is GPU-equivalents, said as such."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cluster_dirs import ROOT
from fastapi.testclient import TestClient


def _node(nodes: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(n for n in nodes if n["name"] == name)


def test_every_resource_says_its_unit(client: TestClient) -> None:
    nodes = client.get("/api/v1/nodes").json()["nodes"]
    mps = _node(nodes, "l4-mps-01")
    assert mps["resources"] == [
        {"resource": "nvidia.com/gpu", "unit": "MPS replica", "allocatable": 8, "used": 0, "free": 8}]
    assert mps["freeGpuEquivalents"] == 2  # 8 replicas of 4 per GPU: 2 GPUs
    dgx = _node(nodes, "dgx-h100-01")
    assert dgx["resources"] == [{"resource": "nvidia.com/gpu", "unit": "GPU", "allocatable": 8, "used": 4, "free": 4}]
    assert (dgx["usedGpuEquivalents"], dgx["freeGpuEquivalents"]) == (4, 4)
    mig = _node(nodes, "hgx-a100-mig-01")
    units = {r["resource"]: r["unit"] for r in mig["resources"]}
    assert units == {"nvidia.com/mig-1g.10gb": "1g.10gb slice", "nvidia.com/mig-2g.20gb": "2g.20gb slice",
                     "nvidia.com/mig-3g.40gb": "3g.40gb slice"}  # no "0 / 0 GPU" line
    assert mig["freeGpuEquivalents"] == round(15 / 7 + 8 * 2 / 7 + 8 * 3 / 7, 2)


def test_the_node_page_adds_up_by_unit_and_sorts_by_gpu_equivalents() -> None:
    script = (ROOT / "webhook" / "ui" / "app.js").read_text()
    # No folding of replicas into GPUs in the totals, no sum over every resource, no GPU-equivalents shown as
    # what a type has free.
    assert "value / replicas" not in script and "resourceSum" not in script
    assert "GPU-equivalents free" not in script
    assert "value: (n) => n.freeGpuEquivalents" in script and "value: (n) => n.usedGpuEquivalents" in script
    assert "sorted by GPU-equivalents" in script


def test_docs_say_the_units(tmp_path: Path) -> None:
    ui = (ROOT / "docs" / "ui.md").read_text()
    assert "one unit" in ui and "GPU-equivalents" in ui
