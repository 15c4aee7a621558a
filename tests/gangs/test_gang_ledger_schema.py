"""The GangLedger CRD lists every field a gang record writes: the API server prunes what a structural schema
does not list, and a pruned `releasedUpTo` would let a recorded release cover the pods of a later run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import yaml

from webhook.gangs.ledger import GangRecord, records_from_json, records_to_json
from webhook.placement.rooms import KIND_CLIQUE, RoomId

CRD = Path(__file__).resolve().parents[2] / "charts" / "kgwe" / "crds" / "gangledgers.kgwe.io.yaml"


def _unlisted(schema: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Paths in `value` the schema does not list (what the API server would prune)."""
    if isinstance(value, dict) and "properties" in schema:
        found = []
        for key, child in value.items():
            if key not in schema["properties"]:
                found.append(f"{path}.{key}")
            else:
                found.extend(_unlisted(schema["properties"][key], child, f"{path}.{key}"))
        return found
    if isinstance(value, list) and "items" in schema:
        return [p for index, item in enumerate(value) for p in _unlisted(schema["items"], item, f"{path}[{index}]")]
    return []


def test_every_field_of_a_released_record_survives_the_crd_schema() -> None:
    crd = yaml.safe_load(CRD.read_text())
    (version,) = crd["spec"]["versions"]
    spec_schema = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    record = GangRecord(
        namespace="ml", gang="llm", size=8, gpus_per_pod=4, types=("nvidia-gb200-186gb",),
        room=RoomId(KIND_CLIQUE, "kgwe.io/nvlink-clique", "0c1e0000-0000-4000-8000-000000000000.1"),
        created_at=1_790_000_000.5, released_at=1_790_000_030.25, released_upto="2026-09-21T14:13:20Z",
        expired=True, reason="1 of 8 members exist", short_gpus=4, warned=True,
    )
    spec = {"gangs": records_to_json({record.key: record})}
    assert set(spec["gangs"][0]) == {
        "namespace", "gang", "size", "gpusPerPod", "types", "room", "createdAt", "releasedAt", "releasedUpTo",
        "expired", "reason", "shortGPUs", "warned",
    }  # every field set: a field added to the record without the schema fails here
    assert _unlisted(spec_schema, spec) == []
    jsonschema.Draft4Validator(spec_schema).validate(spec)
    assert records_from_json(spec["gangs"]) == {record.key: record}
