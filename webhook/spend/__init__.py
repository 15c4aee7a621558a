"""Costs over time and budgets (SPEC section 12, docs/costs.md). Read-only: it admits nothing and keeps no
time series of its own; Prometheus keeps the history of KGWE's per-pod cost series.

    window.py   the stretch of time a view covers, its buckets, the month
    promql.py   the queries that integrate KGWE's cost series over a window
    rates.py    each GPU pod's rate, tenant, workload, run and lifetime, from one snapshot
    memo.py     those rates kept per pod object between reads: only changed pods are computed again
    ledger.py   what each pod spent within a window (exact money x seconds), from its lifetime
    history.py  the same records read from Prometheus, and idle time from the DCGM exporter
    report.py   the document of the command line, the API and the Costs page (one rounding, to the cent)
    metrics.py  kgwe_budget_*
    service.py  the source chosen (Prometheus or the pods), answers cached; the budget states admission reads
    warm.py     the Costs page's windows computed off the event loop and kept as JSON for the API
"""
