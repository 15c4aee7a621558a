"""The node agent against the real NVIDIA driver, where one is loaded: what `kgwe agent` reads through pynvml
and libnvidia-ml must agree with what `nvidia-smi` reports of the same GPUs.

Skipped where no driver answers (CI, development machines): the fake library in tests/fixtures/nvml covers
the agent's logic there. Run on a GPU machine with `python -m pytest tests/agent/test_real_nvml.py`.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pynvml
import pytest

from agent.document import build_document
from agent.nvlink import normalise_bus_id
from agent.nvml_discovery import scan
from agent.publisher import desired_labels
from policies.vocabulary.accelerator_types import UNKNOWN, default_table
from policies.vocabulary.topology_schema import LABEL_ACCELERATOR_TYPE

ROOT = Path(__file__).resolve().parents[2]
SMI_FIELDS = ("index", "uuid", "name", "memory.total", "pci.bus_id", "compute_mode", "mig.mode.current")


@pytest.fixture(scope="module")
def smi_rows() -> list[dict[str, str]]:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        pytest.skip(f"no NVIDIA driver answers here: {exc}")
    pynvml.nvmlShutdown()
    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.skip("a driver answers but nvidia-smi is not on PATH to compare with")
    out = subprocess.run(
        [smi, f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    return [dict(zip(SMI_FIELDS, (cell.strip() for cell in row), strict=True))
            for row in csv.reader(out.strip().splitlines())]


def test_every_gpu_is_read_as_nvidia_smi_reports_it(smi_rows: list[dict[str, str]]) -> None:
    doc = build_document(scan(), node_name="real-nvml", now=datetime.now(UTC))
    assert len(doc.gpus) == len(smi_rows)
    table = default_table()
    for gpu, row in zip(sorted(doc.gpus, key=lambda g: g.index), smi_rows, strict=True):
        assert gpu.index == int(row["index"])
        assert gpu.uuid == row["uuid"]
        assert gpu.name == row["name"]
        assert gpu.memory_mib == int(row["memory.total"])
        assert gpu.pci_bus_id is not None
        assert normalise_bus_id(gpu.pci_bus_id) == normalise_bus_id(row["pci.bus_id"])
        assert gpu.healthy, gpu.error
        assert gpu.mig_enabled == (row["mig.mode.current"] == "Enabled")
        # A GPU model the table knows is typed by its NVML name, never by the memory fallback.
        assert gpu.accelerator_type != UNKNOWN
        if table.get(gpu.accelerator_type) is None:
            pytest.fail(f"{gpu.name} ({gpu.memory_mib} MiB) is typed {gpu.accelerator_type}, not a type of the "
                        "table: add its NVML name as an alias")
    assert doc.accelerator_type == doc.gpus[0].accelerator_type or doc.accelerator_type == "mixed"
    assert desired_labels(doc)[LABEL_ACCELERATOR_TYPE] == doc.accelerator_type


def test_the_agent_command_prints_the_document_of_the_real_gpus(smi_rows: list[dict[str, str]]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "agent.main", "--dry-run", "--node-name", "real-nvml"],
        capture_output=True, text=True, check=True, timeout=120, cwd=ROOT,
    ).stdout
    doc = json.loads(out)
    assert [g["uuid"] for g in doc["gpus"]] == [row["uuid"] for row in smi_rows]
    assert doc["driverVersion"]
    assert doc["nvlink"]["domainSize"] <= len(smi_rows)
