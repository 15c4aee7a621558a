"""A node plan as NVIDIA's MIG manager reads it: a mig-parted config and the name the node's
`nvidia.com/mig.config` label gives it (REFERENCE Part E 3: `version: v1`, `mig-configs: {name: [{devices,
mig-enabled, mig-devices}]}`).

GPUs with the same layout share one entry (`devices: all` when every GPU does). The name is derived from the
content, so two nodes with the same plan name the same config and a config's name never changes meaning.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import yaml

from webhook.migplan.layouts import Layout

CONFIG_PREFIX = "kgwe-"


def config_entries(layouts: list[Layout]) -> list[dict[str, Any]]:
    """The mig-parted entries for per-GPU layouts (index = GPU index)."""
    groups: dict[Layout, list[int]] = {}
    for index, layout in enumerate(layouts):
        groups.setdefault(layout, []).append(index)
    entries = []
    for layout, devices in sorted(groups.items(), key=lambda item: item[1]):
        entries.append({
            "devices": "all" if len(groups) == 1 else devices,
            "mig-enabled": True,
            "mig-devices": dict(layout),
        })
    return entries


def config_name(type_id: str, entries: list[dict[str, Any]]) -> str:
    """`kgwe-a100-80gb-<8 hex>`: the model (a config is only valid for it) and a digest of the entries."""
    digest = hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()[:8]
    model = type_id.removeprefix("nvidia-")
    return f"{CONFIG_PREFIX}{model}-{digest}"


def mig_parted_document(configs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The whole mig-parted configuration file holding `configs`."""
    return {"version": "v1", "mig-configs": dict(sorted(configs.items()))}


def with_config(text: str | None, name: str, entries: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    """The MIG manager's file `text` with config `name` added, every other config kept as it is:
    (the new file, None); (None, None) when it holds that config already; (None, why) when it cannot be
    added: not a mig-parted file, or a config of that name that says something else (never overwritten).
    No file yet is an empty one."""
    try:
        document = yaml.safe_load(text or "") or {"version": "v1"}
    except yaml.YAMLError as exc:
        return None, f"the MIG manager's config is not YAML: {str(exc).splitlines()[0]}"
    configs = document.get("mig-configs", {}) if isinstance(document, dict) else None
    if not isinstance(configs, dict) or document.get("version") != "v1":
        return None, "the MIG manager's config is not a mig-parted file (version: v1, mig-configs: {...})"
    if name in configs:
        if configs[name] == entries:
            return None, None
        return None, f"the MIG manager's config {name} says something else than the plan: not overwritten"
    document["mig-configs"] = {**configs, name: entries}
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False), None
