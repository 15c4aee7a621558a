"""The shared kernel: what the webhook's and the policies' parts share that is not the policy engine.

The background tasks every loop beside the request path runs as (`background`), the Kubernetes API client
with its deadlines (`kube_client`), the store of every record KGWE keeps in the API (`records`: one object,
compare-and-swap on its resourceVersion) and the Prometheus metrics of the policy layer (`metrics`). With the
vocabulary (`policies/vocabulary`, which the agent imports too) it is the bottom of `policies/`: it
imports nothing of the engines, the loading or the runtime (the import contracts in pyproject.toml).
"""
