"""Quotas released by KGWE (SPEC section 10): a wing that plugs into the admission core and the controllers.

- `gate.py`: which pods carry the `kgwe.io/quota` scheduling gate (added at `/mutate`);
- `waiters.py`: what a gated pod asks, read from the cluster model (its types narrowed by its own constraints);
- `incremental.py`: the controller's picture of every tenant, kept from the watch's events;
- `snapshot_picture.py`: admission's picture of a snapshot, read again only where it differs from the last
  (webhook/cluster/pod_changes.py: which pods differ; the free GPUs the queue asks are placement's, kept alike);
- `admission.py`: what `/validate` refuses without holding any state, and what `kgwe review` says;
- `controller.py`: the leader's controller that releases gated pods in order, pins, and reports why others wait.

The queue itself (usage, fit, order) is pure and lives in `policies/quota/queue.py`.
"""
