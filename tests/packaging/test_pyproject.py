"""The wheel ships every package and data folder, and pyproject.toml uses the forms setuptools accepts silently."""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_namespace_packages

ROOT = Path(__file__).resolve().parents[2]


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _discovered() -> set[str]:
    find = _config()["tool"]["setuptools"]["packages"]["find"]
    return set(find_namespace_packages(where=str(ROOT), include=find["include"], exclude=find["exclude"]))


def test_license_is_an_spdx_expression_not_a_table() -> None:
    # A table is deprecated since setuptools 77 and prints a warning block on every install.
    assert _config()["project"]["license"] == "Apache-2.0"


def test_every_source_and_data_folder_is_a_discovered_package() -> None:
    discovered = _discovered()
    for root in ("webhook", "policies", "agent", "certs", "rego"):
        for folder in [ROOT / root, *(p for p in (ROOT / root).rglob("*") if p.is_dir())]:
            if folder.name == "__pycache__":
                continue
            has_files = any(f.is_file() and f.suffix != ".pyc" for f in folder.iterdir())
            if has_files:
                name = ".".join(folder.relative_to(ROOT).parts)
                assert name in discovered, f"{name} would be left out of the wheel"
    assert not any("__pycache__" in name for name in discovered)
    assert {"webhook.ui", "webhook.gangs", "webhook.workloads", "rego.admission", "rego.lib"} <= discovered
