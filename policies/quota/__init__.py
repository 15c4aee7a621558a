"""Tenant quotas per accelerator type and hardware profile: the model and tenant resolution (`model`), the
compare-and-swap store contract and the in-memory store (`store`), the file and API-server stores
(`file_store`, `kube_store`), the admission check (`check`) and the status reconciler (`reconciler`).
"""
