"""What AMD's node labeller says about a node's GPUs, in the three label forms it has used."""

from __future__ import annotations

from dataclasses import dataclass

from policies.vocabulary import keys
from webhook.cluster.node_reading import int_label


@dataclass(frozen=True)
class AmdLabels:
    """What AMD's node labeller says about a node's GPUs (None where it says nothing)."""

    product: str | None
    device_id: str | None
    vram_gb: int | None
    family: str | None

    @property
    def present(self) -> bool:
        return bool(self.product or self.device_id)


def _amd_value(labels: dict[str, str], key: str) -> str | None:
    """A labeller value: `amd.com/gpu.X=V`, `beta.amd.com/gpu.X=V`, or the oldest form, where the value
    is in the key and the label's value counts the GPUs (`beta.amd.com/gpu.X.V=8`; the most common wins)."""
    for name in (key, keys.AMD_BETA_PREFIX + key):
        if labels.get(name):
            return labels[name]
    prefix = keys.AMD_BETA_PREFIX + key + "."
    counted = [(int_label(v) or 0, k[len(prefix) :]) for k, v in labels.items() if k.startswith(prefix)]
    return max(counted)[1] if counted else None


def amd_labels(labels: dict[str, str]) -> AmdLabels:
    """The labeller's product, device id, VRAM (GB) and family of a node's labels."""
    vram = _amd_value(labels, keys.AMD_GPU_VRAM)
    vram_gb = int_label(vram.upper().removesuffix("GB").removesuffix("G")) if vram else None
    return AmdLabels(
        product=_amd_value(labels, keys.AMD_GPU_PRODUCT_NAME),
        device_id=_amd_value(labels, keys.AMD_GPU_DEVICE_ID),
        vram_gb=vram_gb,
        family=_amd_value(labels, keys.AMD_GPU_FAMILY),
    )
