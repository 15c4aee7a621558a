"""What the pod asks for: its intent, its HardwareProfile and the policy decision merged into one request.

Precedence, lowest first: the profile's defaults, the pod's `kgwe.io/` intent, the policy decision
(authoritative where it sets a field). These steps narrow nothing yet; they fill the context's
`profile_spec`, `requested`, `sharing`, `mig_profile`, `fraction`, `topology` and `gang`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policies.vocabulary import resources
from policies.vocabulary.objects import ObjectView
from webhook.cluster.model import ClusterModel
from webhook.placement.context import PlanContext, decimal_or_none


def _profile_spec(model: ClusterModel, name: str) -> Mapping[str, Any] | None:
    """The spec of the HardwareProfile `name` (empty when malformed); None when there is no such profile."""
    obj = model.hardware_profiles.get(name)
    return None if obj is None else ObjectView(obj).spec


def resolve_profile(ctx: PlanContext) -> bool:
    """A named HardwareProfile brings types, sharing, extra selectors, tolerations and a price; naming one
    that does not exist is refused."""
    intent, plan = ctx.intent, ctx.plan
    if not intent.profile:
        return True
    plan.profile = intent.profile
    ctx.profile_spec = _profile_spec(ctx.model, intent.profile)
    if ctx.profile_spec is None:
        known = ", ".join(sorted(ctx.model.hardware_profiles)) or "none"
        plan.refusals.append(f"hardware profile {intent.profile!r} does not exist; profiles: {known}")
        return False
    return True


def asked_types(ctx: PlanContext) -> bool:
    """The types asked for: the intent's, within the profile's (a type outside it is refused), else the
    profile's; a policy decision's types replace both."""
    requested = list(ctx.intent.accelerator_types)
    if ctx.profile_spec is not None:
        profile_types = [str(t) for t in ctx.profile_spec.get("acceleratorTypes") or []]
        if requested and profile_types:
            outside = [t for t in requested if t not in profile_types]
            if outside:
                ctx.plan.refusals.append(
                    f"kgwe.io/accelerator {', '.join(outside)} is not in hardware profile {ctx.intent.profile!r} "
                    f"({', '.join(profile_types)})"
                )
                return False
        elif profile_types:
            requested = profile_types
    if ctx.fields.get("acceleratorTypes"):
        requested = [str(t) for t in ctx.fields["acceleratorTypes"]]
    ctx.requested = requested
    return True


def asked_sharing(ctx: PlanContext) -> bool:
    """Sharing mode, MIG profile, MPS fraction, topology and gang, by precedence. A pod that already asks
    for a MIG resource is a MIG pod; a fraction without a mode means MPS."""
    intent, fields = ctx.intent, ctx.fields
    sharing_spec = (ctx.profile_spec or {}).get("sharing") or {}
    sharing = intent.sharing or (str(sharing_spec.get("mode")) if sharing_spec.get("mode") else None)
    mig_profile: str | None = str(sharing_spec["migProfile"]) if sharing_spec.get("migProfile") else None
    fraction = intent.gpu_fraction
    if fraction is None:
        fraction = decimal_or_none(sharing_spec.get("gpuFraction"))
    topology = intent.topology
    gang = intent.gang
    decided_sharing = fields.get("sharing") or {}
    if isinstance(decided_sharing, dict) and decided_sharing.get("mode"):
        sharing = str(decided_sharing["mode"])
        mig_profile = str(decided_sharing["migProfile"]) if decided_sharing.get("migProfile") else mig_profile
        fraction = decimal_or_none(decided_sharing.get("gpuFraction")) or fraction
    if fields.get("topology"):
        topology = str(fields["topology"])
    if fields.get("gang"):
        gang = str(fields["gang"])
    # A pod that already asks for a MIG resource (a user who named it, or an earlier pass) is a MIG pod.
    if ctx.demand.mig and sharing in (None, "mig"):
        sharing = "mig"
        mig_profile = mig_profile or sorted(ctx.demand.mig)[0]
    if sharing is None and fraction is not None:
        sharing = "mps"
    ctx.sharing, ctx.mig_profile, ctx.fraction, ctx.topology, ctx.gang = sharing, mig_profile, fraction, topology, gang
    ctx.plan.gpu_memory_bytes = intent.gpu_memory_bytes
    ctx.plan.gang = gang
    return True


def hami_defers(ctx: PlanContext) -> bool:
    """A pod with HAMi resources has its GPUs shared by HAMi: KGWE drops MIG and MPS and selects nodes only."""
    other = ctx.demand.other
    hami = bool(other) and any(key in other for key in resources.HAMI_RESOURCES)
    if hami and ctx.sharing in ("mig", "mps"):
        ctx.plan.warnings.append("HAMi resources present: KGWE leaves GPU sharing to HAMi and selects nodes only")
        ctx.sharing = None
    return True
