"""The shared vocabulary of KGWE: the words the agent, the webhook and the policies all speak.

Accelerator type ids and their alias table (`accelerator_types`), GPU product names as GFD spells them
(`product_names`), the `kgwe.io/topology` document the agent writes and the webhook reads
(`topology_schema`), Kubernetes quantities (`quantities`), extended resource names (`resources`), every
label and annotation key (`keys`), label selectors (`selectors`), the typed read-only views of pods and
object metadata over the API's dicts (`objects`) and of nodes (`nodes`), and what tells replicas apart
(`identity`). Pure data and pure functions: nothing here does I/O or imports anything of KGWE outside
this package, so every layer may import it.
It sits under `policies/` because the top-level folders are fixed and `policies` is the lowest layer
that both the webhook and the agent may import (docs/decisions.md).
"""
