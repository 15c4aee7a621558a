"""MIG layouts that follow demand (SPEC section 11, docs/mig.md): per node a `MIGStrategy` selects, the
layout of NVIDIA's MIG manager that best serves waiting pods, recommendations and the preferred mix.

    strategy.py    the MIGStrategy custom resource, read into a typed model
    layouts.py     the valid layouts of one GPU, from the slice rules (policies/vocabulary/mig_geometry.py)
    demand.py      what is wanted: pending pods, workloads recommended onto slices
    planner.py     one node's plan (pure)
    mig_config.py  a plan as a mig-parted config and the nvidia.com/mig.config value naming it
    views.py       the cluster's plan document (CLI, API, status)
    apply.py       mode apply: the leader labels idle nodes (the only part that writes)
"""
