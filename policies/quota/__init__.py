"""Tenant quotas per accelerator type and hardware profile, as pure arithmetic: tenants, their limits and
what one pod counts against them (`model`), which gated pods may start now (`queue`), what each limit
counts now (`usage`) and budgets judged on projected spend (`budget`). The admission gate and the
controller that keep quota state in a cluster live in webhook/quotas.
"""
