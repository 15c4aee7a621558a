"""`kgwe nodes` and `kgwe profiles`: the inventory's node and hardware-profile views on the command line."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from webhook.output import FORMATS, render
from webhook.reports.reading import Cluster, CommandError, as_json
from webhook.reports.tables import format_table

if TYPE_CHECKING:
    from webhook.runtime import Runtime


def _gpu_resources(resources: dict[str, Any]) -> str:
    return ",".join(f"{k.split('/')[-1]}={v}" for k, v in sorted(resources.items()) if v) or "-"


def cmd_nodes(args: argparse.Namespace, cluster: Cluster) -> str:
    from webhook.inventory.capacity import Inventory
    from webhook.inventory.nodes import nodes_view

    runtime = cluster.runtime
    view = nodes_view(Inventory(runtime.store.snapshot(), runtime.config))
    if args.output in FORMATS:
        return render(view, args.output)
    wide = args.output == "wide"
    rows = []
    for node in view["nodes"]:
        mig = node["mig"]
        sharing = node["sharing"]
        topology = node["topology"]
        rows.append([
            node["name"],
            node["acceleratorType"] or "-",
            node["typeSource"] if node["acceleratorType"] else "-",
            node["gpus"],
            _gpu_resources(node["allocatable"]),
            _gpu_resources(node["used"]),
            f"{mig['strategy']}{'' if mig['ready'] else ' (not ready)'}" if mig["profiles"] else "-",
            f"{sharing['strategy']}x{sharing['replicas']}" if sharing["strategy"] != "none" else "-",
            node["nvlinkDomainSize"] or "-",
            ("stale" if topology["stale"] else f"{topology['ageSeconds']:.0f}s") if topology["present"] else "-",
            "cordoned" if node["unschedulable"] else "",
            *(_node_wide(node) if wide else []),
        ])
    headers = ["NAME", "TYPE", "SOURCE", "GPUS", "ALLOCATABLE", "USED", "MIG", "SHARING", "NVLINK", "TOPOLOGY",
               "STATUS"]
    wide_headers = ["PRODUCT", "MEMORY/GPU", "PODS", "GPU-EQ USED", "GPU-EQ FREE", "CLIQUE", "TAINTS"]
    nodes = format_table(headers + (wide_headers if wide else []), rows,
                         right=["GPUS", "NVLINK", "PODS", "GPU-EQ USED", "GPU-EQ FREE"])
    types = format_table(
        ["TYPE", "PRODUCT", "NODES", "GPUS", "AVAILABLE"],
        [[t["id"], t["productName"], t["nodes"], t["gpus"], t["available"]] for t in view["types"]],
        right=["NODES", "GPUS", "AVAILABLE"],
    )
    return f"{nodes}\n\n{types}"


def _node_wide(node: dict[str, Any]) -> list[Any]:
    memory = node.get("memoryMiB")
    taints = node.get("taints") or []
    return [
        node.get("productName") or "-",
        f"{memory / 1024:.0f}Gi" if memory else "-",
        node.get("pods", 0),
        node.get("usedGpuEquivalents", "-"),
        node.get("freeGpuEquivalents", "-"),
        node.get("clique") or "-",
        ",".join(f"{t.get('key')}:{t.get('effect')}" for t in taints if isinstance(t, dict)) or "-",
    ]


def _sharing_text(sharing: dict[str, Any]) -> str:
    if sharing["mode"] == "mig":
        return f"mig {sharing.get('migProfile', '?')}"
    if sharing["mode"] == "mps" and "gpuFraction" in sharing:
        return f"mps {sharing['gpuFraction']:g}"
    return str(sharing["mode"])


def _price_range_text(price_range: dict[str, Any] | None) -> str:
    """"2.80" or "2.80-4.50" per GPU-hour; "*" marks a range over every type when none has a GPU free now."""
    if price_range is None:
        return "-"
    low, high = price_range["perGPUHour"]["min"], price_range["perGPUHour"]["max"]
    return f"{low if low == high else f'{low}-{high}'}{'' if price_range['now'] else '*'}"


def cmd_profiles(args: argparse.Namespace, cluster: Cluster) -> str:
    from webhook.inventory.capacity import Inventory
    from webhook.inventory.profiles import hardware_profiles_view

    runtime = cluster.runtime
    if args.from_nodes or args.type_id:
        return _proposal(args, runtime)
    if args.kueue:
        from webhook.read_seams import WORKLOAD_READS

        snapshot = runtime.store.snapshot()
        cohort, dra = args.cohort, runtime.config.dra
        # The manifests are YAML already (with comments that say what to change); JSON is asked for.
        if args.output == "json":
            return as_json(WORKLOAD_READS.value.kueue_manifests(snapshot, cohort=cohort, dra=dra))
        return WORKLOAD_READS.value.render_kueue(snapshot, cohort=cohort, dra=dra)
    view = hardware_profiles_view(Inventory(runtime.store.snapshot(), runtime.config))
    if args.output in FORMATS:
        return render(view, args.output)
    wide = args.output == "wide"
    rows = [
        [p["name"], p["displayName"], _sharing_text(p["sharing"]), ",".join(t["id"] for t in p["acceleratorTypes"]),
         p["total"], p["available"], p["pending"], _price_range_text(p["priceRange"]),
         *([p["unit"], p["pricePerUnitHour"] or "-", p["description"] or "-"] if wide else [])]
        for p in view["profiles"]
    ]
    if not rows:
        return "No HardwareProfiles. Propose one with: kgwe profiles --from-nodes NODE[,NODE...]"
    table = format_table(
        ["NAME", "DISPLAY NAME", "SHARING", "TYPES", "TOTAL", "AVAILABLE", "PENDING", f"{view['currency']}/GPU-H",
         *(["UNIT", f"{view['currency']}/UNIT-H", "DESCRIPTION"] if wide else [])],
        rows, right=["TOTAL", "AVAILABLE", "PENDING"],
    )
    if any(p["priceRange"] and not p["priceRange"]["now"] for p in view["profiles"]):
        table += "\n* nothing free now: the price over every type of the profile"
    return table


def _proposal(args: argparse.Namespace, runtime: Runtime) -> str:
    from webhook.profile_proposal import ProposalError, propose_profile

    try:
        proposal = propose_profile(
            runtime.store.snapshot(), runtime.config, selection=args.from_nodes, type_id=args.type_id, name=args.name
        )
    except ProposalError as exc:
        raise CommandError(str(exc)) from exc
    if args.output in FORMATS:
        return render(proposal.as_document(), args.output)
    notes = "".join(f"# note: {note}\n" for note in proposal.notes)
    return f"# Proposed from nodes: {', '.join(proposal.nodes)}\n{notes}{proposal.to_yaml().rstrip()}"
