"""Cluster directories for the guarantee tests: the example cluster plus planted objects."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml


def plant_policy(target: Path, source: Path, *objects: dict[str, Any]) -> Path:
    """A copy of `source` at `target` with `objects` added as one file."""
    shutil.copytree(source, target)
    (target / "zz-planted.yaml").write_text(yaml.safe_dump_all(list(objects), sort_keys=False), encoding="utf-8")
    return target
