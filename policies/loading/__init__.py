"""GPUPolicy loading: the custom resource, the sources of a policy set (the built-in policies, directories,
GPUPolicies) and the policy set compiled from them.
"""
