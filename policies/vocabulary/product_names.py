"""GPU product names as GPU Feature Discovery and the vendors spell them: sanitised, split into the base
model, the MIG profile and whether the GPU is shared, and the slugs and device ids the alias table keys.
"""

from __future__ import annotations

import re


def sanitise_product(name: str) -> str:
    """GFD's sanitising of a product name: drop odd characters, turn whitespace runs into `-`."""
    kept = re.sub(r"[^A-Za-z0-9\-_. ]", "", name.strip())
    return re.sub(r"\s+", "-", kept)


def split_product(product: str) -> tuple[str, str | None, bool]:
    """Split a GFD product label into (base model, MIG profile or None, shared?)."""
    value = sanitise_product(product)
    shared = False
    if value.upper().endswith("-SHARED"):
        value, shared = value[: -len("-SHARED")], True
    profile: str | None = None
    if "-MIG-" in value:
        value, profile = value.split("-MIG-", 1)
    return value, profile, shared


def normal_device_id(value: str) -> str:
    return value.strip().lower().removeprefix("0x")


def slug(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", text.lower())).strip("-")
