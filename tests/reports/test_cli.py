"""`kgwe nodes`, `kgwe profiles`, `kgwe audit`, `kgwe costs` on cluster directories."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cluster_dirs import EXAMPLE_CLUSTER, EXAMPLE_CONFIG, ROOT, copy_example_cluster, gpu_pod, plant

from webhook.reports.commands import run

OFFLINE = ["--cluster", str(EXAMPLE_CLUSTER), "--config", str(EXAMPLE_CONFIG)]


def kgwe(capsys: pytest.CaptureFixture[str], command: str, *argv: str) -> tuple[int, str, str]:
    status = run(command, list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def rows(table: str) -> dict[str, list[str]]:
    """Table lines keyed by their first column, split on runs of two or more spaces."""
    out: dict[str, list[str]] = {}
    for line in table.splitlines():
        if line.strip():
            cells = re.split(r"\s{2,}", line.strip())
            out.setdefault(cells[0], cells)
    return out


def test_nodes_table(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = kgwe(capsys, "nodes", *OFFLINE)
    assert (status, err) == (0, "")
    header = out.splitlines()[0]
    assert header.split() == ["NAME", "TYPE", "SOURCE", "GPUS", "ALLOCATABLE", "USED", "MIG", "SHARING", "NVLINK",
                              "TOPOLOGY", "STATUS"]
    table = rows(out)
    assert table["dgx-h100-01"][:6] == ["dgx-h100-01", "nvidia-h100-80gb", "agent-label", "8", "gpu=8", "gpu=4"]
    assert table["gpu-unlabelled-01"][1] == "unknown"
    assert table["l4-mps-01"][5:8] == ["-", "-", "mpsx4"]  # USED, MIG, SHARING
    # The type summary after the node table.
    assert table["nvidia-h100-80gb"] == ["nvidia-h100-80gb", "NVIDIA H100 80GB", "2", "16", "8"]  # 4 busy on each
    # Columns line up: every node row starts its TYPE column where the header does.
    type_column = header.index("TYPE")
    node_lines = out.split("\n\n")[0].splitlines()[1:]
    assert all(line[type_column - 2: type_column] == "  " for line in node_lines)


def test_nodes_json_is_the_api_document(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _err = kgwe(capsys, "nodes", *OFFLINE, "-o", "json")
    assert status == 0
    document = json.loads(out)
    assert {n["name"] for n in document["nodes"]} >= {"dgx-h100-01", "cpu-01"}
    assert {t["id"] for t in document["types"]} >= {"nvidia-h100-80gb", "unknown"}


def test_profiles_table(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _err = kgwe(capsys, "profiles", *OFFLINE)
    assert status == 0
    table = rows(out)
    # 8 of 16 free (4 busy on each DGX); 8 pending: ml-research/waiting (examples/cluster/pods-waiting.yaml).
    assert table["premium-h100"] == ["premium-h100", "Premium H100 80GB", "exclusive", "nvidia-h100-80gb", "16", "8",
                                     "8", "4.50"]
    assert table["small-mig"][2:8] == ["mig 1g.10gb", "nvidia-a100-80gb", "28", "27", "0", "2.80"]
    assert "USD/GPU-H" in out.splitlines()[0]


def test_profiles_from_nodes_prints_a_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _err = kgwe(capsys, "profiles", *OFFLINE, "--from-nodes", "nvidia.com/gpu.family in (ampere)",
                             "--name", "a100-slices")
    assert status == 0
    manifest = yaml.safe_load(out)
    assert manifest["kind"] == "HardwareProfile"
    assert manifest["metadata"]["name"] == "a100-slices"
    assert manifest["spec"]["sharing"] == {"mode": "mig", "migProfile": "1g.10gb"}
    assert manifest["spec"]["pricePerGPUHour"] == "2.80"
    assert out.startswith("# Proposed from nodes: hgx-a100-mig-01, hgx-a100-mig-02")

    status, out, _err = kgwe(capsys, "profiles", *OFFLINE, "--from-nodes", "dgx-h100-01", "-o", "json")
    assert json.loads(out)["object"]["spec"]["acceleratorTypes"] == ["nvidia-h100-80gb"]


def test_profiles_from_unknown_nodes_fails(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = kgwe(capsys, "profiles", *OFFLINE, "--from-nodes", "nope-1,nope-2")
    assert status == 2 and out == ""
    assert "no such node: nope-1, nope-2" in err


def test_audit_table_and_exit_code(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, out, _err = kgwe(capsys, "audit", *OFFLINE, "--exit-code")
    # One failing finding in the example cluster, the workload it shows refused; the others are Warn findings.
    assert status == 1
    assert "kgwe.admission.memory_limit" in out
    [refused] = [line.split()[:6] for line in out.splitlines() if "fail" in line.split()[4:5]]
    assert refused == ["team-a", "Deployment/chat-h200", "policy", "high", "fail", "kgwe-workload-admission"]

    cluster = copy_example_cluster(tmp_path / "cluster")
    plant(cluster, "bad.yaml", gpu_pod("root", "team-a", node="dgx-h100-02", privileged=True))
    args = ["--cluster", str(cluster), "--config", str(EXAMPLE_CONFIG)]
    status, out, _err = kgwe(capsys, "audit", *args)
    assert status == 0
    [line] = [line.split()[:6] for line in out.splitlines() if line.split()[1:2] == ["root"]]
    assert line == ["team-a", "root", "policy", "high", "fail", "kgwe.admission.privileged"]
    assert kgwe(capsys, "audit", *args, "--exit-code")[0] == 1

    status, out, _err = kgwe(capsys, "audit", *args, "-o", "yaml")
    reports = list(yaml.safe_load_all(out))
    # OpenReports by default (audit.reportFormat), as Kyverno writes them.
    assert {(r["apiVersion"], r["kind"]) for r in reports} == {
        ("openreports.io/v1alpha1", "Report"), ("openreports.io/v1alpha1", "ClusterReport"),
    }
    team_a = next(r for r in reports if r["metadata"].get("namespace") == "team-a")
    assert team_a["summary"]["fail"] == 2 and team_a["source"] == "kgwe"  # root and the example's chat-h200

    config = tmp_path / "wgpolicyk8s.yaml"
    config.write_text(EXAMPLE_CONFIG.read_text() + "\naudit: {reportFormat: wgpolicyk8s}\n")
    status, out, _err = kgwe(capsys, "audit", "--cluster", str(cluster), "--config", str(config), "-o", "yaml")
    reports = list(yaml.safe_load_all(out))
    assert {(r["apiVersion"], r["kind"]) for r in reports} == {
        ("wgpolicyk8s.io/v1alpha2", "PolicyReport"), ("wgpolicyk8s.io/v1alpha2", "ClusterPolicyReport"),
    }
    assert all("source" not in r for r in reports)

    status, out, _err = kgwe(capsys, "audit", *args, "-o", "json")
    assert any(f["pod"] == "root" and f["category"] == "policy" for f in json.loads(out)["findings"])


def test_costs_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cluster = copy_example_cluster(tmp_path / "cluster")
    plant(
        cluster, "more.yaml",
        gpu_pod("infer-a", "team-a", gpus=1, node="l4-mps-01",
                annotations={"kgwe.io/hourly-cost": "0.2", "kgwe.io/tenant": "team-a"}),
        # No annotation (admitted without KGWE): computed, 2 H100 at 4.50.
        gpu_pod("legacy", "ml-research", gpus=2, node="dgx-h100-02"),
        # Pending pods cost nothing yet.
        gpu_pod("queued", "team-a", gpus=8, phase="Pending", annotations={"kgwe.io/hourly-cost": "36"}),
    )
    args = ["--cluster", str(cluster), "--config", str(EXAMPLE_CONFIG)]
    status, out, _err = kgwe(capsys, "costs", *args)
    assert status == 0
    lines = [line.split() for line in out.splitlines()]
    assert ["team-a", "nvidia-h100-80gb", "1", "18.00", "432.00", "13140.00"] in lines
    assert ["team-a", "nvidia-l4-24gb", "1", "0.20", "4.80", "146.00"] in lines
    assert ["ml-research", "nvidia-h100-80gb", "1", "9.00", "216.00", "6570.00"] in lines
    assert "Total: 99.60 USD/hour" in out  # the example's 90.40, plus 0.20 and 9.00

    status, out, _err = kgwe(capsys, "costs", *args, "-o", "json")
    document = json.loads(out)
    assert document["hourlyCost"] == "99.60"
    legacy = next(p for p in document["pods"] if p["pod"] == "legacy")
    assert (legacy["source"], legacy["hourlyCost"]) == ("computed", "9.00")


@pytest.mark.parametrize("command", ["nodes", "profiles", "audit", "costs"])
def test_help_and_errors(capsys: pytest.CaptureFixture[str], command: str, tmp_path: Path) -> None:
    status, out, _err = kgwe(capsys, command, "--help")
    assert status == 0 and f"usage: kgwe {command}" in out and "--cluster" in out and "--config" in out
    status, out, err = kgwe(capsys, command, "--cluster", str(tmp_path / "missing"))
    assert status == 2 and out == "" and "not a directory" in err
    bad_config = tmp_path / "bad.yaml"
    bad_config.write_text("mode: sometimes\n")
    status, _out, err = kgwe(capsys, command, "--cluster", str(EXAMPLE_CLUSTER), "--config", str(bad_config))
    assert status == 2 and "configuration" in err


def test_through_the_kgwe_entry_point() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from webhook.cli import main; sys.exit(main())", "nodes", *OFFLINE],
        capture_output=True, text=True, cwd=ROOT, timeout=60, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "dgx-h100-01" in result.stdout
