"""GPUPolicy loading: the custom resource, the policy set compiled from it and the built-in policies,
selectors, the aggregate queries, and `kgwe policy test`.
"""
