"""`kgwe mig-plan` against a YAML cluster of A100 and H100 MIG nodes (tests/migplan/cluster)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.cli import main
from webhook.migplan.layouts import valid

CLUSTER = Path(__file__).parent / "cluster"


def _plan(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    assert main(["mig-plan", "--cluster", str(CLUSTER), "-o", "json", *extra]) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_the_plan_serves_waiting_pods_and_leaves_busy_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _plan(capsys)
    (strategy,) = doc["strategies"]
    nodes = {n["node"]: n for n in strategy["nodes"]}
    assert set(nodes) == {"a100-busy", "a100-idle-1", "a100-idle-2", "h100-single"}  # h100-whole: not selected
    assert nodes["a100-busy"]["action"] == "keep" and "team-a/runs" in nodes["a100-busy"]["reason"]
    idle = nodes["a100-idle-1"]
    assert idle["action"] == "change"
    assert {s["who"] for s in idle["serves"]} == {"team-a/wants-3g", "team-a/wants-4g"}
    for layout in idle["layouts"]:
        assert valid("nvidia-a100-80gb", tuple(sorted(layout["migDevices"].items())))
    # The H100 single-strategy node: one profile on every GPU, holding the pod's 30Gi.
    single = nodes["h100-single"]
    assert single["action"] == "change" and list(single["planned"]) == ["3g.40gb"]
    assert doc["unserved"] == []
    configs = doc["migConfig"]
    assert configs["version"] == "v1"
    assert set(configs["mig-configs"]) == {idle["config"], single["config"]}
    for entries in configs["mig-configs"].values():
        assert all(e["mig-enabled"] is True and e["mig-devices"] for e in entries)
    assert "no Prometheus" in doc["usage"]


def test_yaml_output_is_the_same_document(capsys: pytest.CaptureFixture[str]) -> None:
    as_json = _plan(capsys)
    assert main(["mig-plan", "--cluster", str(CLUSTER), "-o", "yaml"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == as_json


def test_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["mig-plan", "--cluster", str(CLUSTER)]) == 0
    out = capsys.readouterr().out
    assert "a100-idle-1" in out and "change" in out and "KGWE never evicts" in out


def test_a_cluster_without_strategies_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "nodes.yaml").write_text((CLUSTER / "nodes.yaml").read_text())
    assert main(["mig-plan", "--cluster", str(tmp_path)]) == 0
    assert "No MIGStrategy" in capsys.readouterr().out


def test_a_malformed_strategy_is_named_and_the_others_planned(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("nodes.yaml", "pods.yaml", "strategy.yaml"):
        (tmp_path / name).write_text((CLUSTER / name).read_text())
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kgwe.io/v1alpha1", "kind": "MIGStrategy", "metadata": {"name": "a-bad"},
        "spec": {"mode": "sometimes"}}))
    doc = _plan_in(tmp_path, capsys)
    bad, good = doc["strategies"]
    assert bad["name"] == "a-bad" and "spec.mode" in bad["problem"]
    assert good["name"] == "inference-pool" and good["nodes"]


def _plan_in(directory: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["mig-plan", "--cluster", str(directory), "-o", "json"]) == 0
    return dict(json.loads(capsys.readouterr().out))
