"""NVLink peer matrix and the node's largest all-to-all NVLink-connected set. Pure functions, no NVML.

Detection recipe (HAMi's, see REFERENCE 3.3): a link whose remote PCI bus id is another GPU's bus id is a
direct link (bridges, direct-attach boards); when two GPUs have no direct link but both reach NVSwitches,
they talk through the switch fabric with the width of the narrower of the two.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# NVML's nvmlNvLinkDeviceType_t values; copied so that this module stays free of NVML.
REMOTE_GPU = 0x00
REMOTE_SWITCH = 0x02


@dataclass(frozen=True)
class NvLinkPort:
    """One active NVLink of a GPU, as seen from that GPU."""

    link: int
    remote_bus_id: str
    remote_type: int


def normalise_bus_id(bus_id: str) -> str:
    """`0000:18:00.0` and `00000000:18:00.0` name the same device: compare in NVML's 8-digit lower-case form."""
    text = bus_id.strip().lower()
    parts = text.split(":")
    if len(parts) == 3:
        parts[0] = parts[0].zfill(8)
    return ":".join(parts)


def _direct(ports: Sequence[NvLinkPort], bus_id: str | None) -> int:
    if bus_id is None:
        return 0
    return sum(1 for port in ports if port.remote_bus_id == bus_id)


def _switched(ports: Sequence[NvLinkPort]) -> int:
    return sum(1 for port in ports if port.remote_type == REMOTE_SWITCH)


def peer_matrix(bus_ids: Sequence[str | None], links: Sequence[Sequence[NvLinkPort]]) -> tuple[list[list[int]], bool]:
    """matrix[i][j] = NVLink links between GPU i and GPU j; also whether any pair is joined through NVSwitch.

    Direct counts are taken from both ends and the larger kept, so one GPU whose link queries failed does not
    hide a bridge that its peer still reports.
    """
    size = len(bus_ids)
    keys = [normalise_bus_id(b) if b else None for b in bus_ids]
    ports = [[NvLinkPort(p.link, normalise_bus_id(p.remote_bus_id), p.remote_type) for p in row] for row in links]
    matrix = [[0] * size for _ in range(size)]
    switched = False
    for i in range(size):
        for j in range(i + 1, size):
            count = max(_direct(ports[i], keys[j]), _direct(ports[j], keys[i]))
            if count == 0:
                via_switch = min(_switched(ports[i]), _switched(ports[j]))
                if via_switch:
                    count, switched = via_switch, True
            matrix[i][j] = matrix[j][i] = count
    return matrix, switched


def largest_all_to_all(matrix: Sequence[Sequence[int]], eligible: Sequence[bool] | None = None) -> list[int]:
    """Indices of the largest set of eligible GPUs in which every pair shares at least one NVLink.

    A maximum clique (Bron-Kerbosch with pivoting): nodes hold at most a few dozen GPUs, so exact search is cheap.
    Ties go to the set with the lowest indices; a lone eligible GPU is a set of one.
    """
    size = len(matrix)
    allowed = [True] * size if eligible is None else list(eligible)
    vertices = {i for i in range(size) if allowed[i]}
    neighbours = {i: {j for j in vertices if j != i and matrix[i][j] > 0} for i in vertices}
    best: list[int] = []

    def expand(clique: list[int], candidates: set[int], excluded: set[int]) -> None:
        nonlocal best
        if not candidates and not excluded:
            ordered = sorted(clique)
            if len(ordered) > len(best) or (len(ordered) == len(best) and ordered < best):
                best = ordered
            return
        if len(clique) + len(candidates) < len(best):
            return
        pivot = max(candidates | excluded, key=lambda v: len(neighbours[v] & candidates))
        for vertex in sorted(candidates - neighbours[pivot]):
            expand([*clique, vertex], candidates & neighbours[vertex], excluded & neighbours[vertex])
            candidates = candidates - {vertex}
            excluded = excluded | {vertex}

    expand([], set(vertices), set())
    return best
