"""What GPUs do (SPEC section 11, docs/usage.md): usage read from Prometheus as NVIDIA's DCGM exporter
publishes it, recommendations per workload, and idle GPUs. Read-only: it admits nothing and keeps no
time series of its own.

    promql.py      the queries (aggregated by pod inside Prometheus) and the aligned window grid
    prometheus.py  the HTTP API client: timeouts, every failure one clear PrometheusUnavailable
    history.py     a pod's per-window history, and the one function that reads it
    owners.py      which workload a pod belongs to (so replicas pool their history)
    decay.py       decaying histograms and their percentiles
    shapes.py      the shapes the cluster offers (MIG, MPS, whole GPUs) and the smallest that holds a need
    recommend.py   a workload's recommendation
    idle.py        idle pods
    views.py       the documents of the command line and the API, with asks, tenants and costs
    metrics.py     kgwe_recommendation_* and kgwe_idle_gpus
    service.py     one read turned into a report, cached for the API
"""
