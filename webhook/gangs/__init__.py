"""All-or-nothing gangs in one NVLink room with the unmodified kube-scheduler (SPEC section 8).

A gang is the live pods (neither finished nor terminating) of one namespace with the same `kgwe.io/gang`
and a `kgwe.io/gang-size` of N; a job restarted under the same name is a new run of the gang, never
completed by the pods of the old one (docs/gangs.md, "Restarts").
The pieces, in the order a gang meets them:

- `spec`: names and a pod's gang membership (the bounded parse of `kgwe.io/gang-size` is the core's:
  webhook/intent.py);
- `rooms`: where a gang can go (a multi-node NVLink clique, or one node's NVLink domain), what is free
  there, and the best-fit choice that counts capacity promised to other unbound gangs as used;
- `plan`: the `gang` step of the placement plan, registered by the assembly (label, clique, gate,
  refusal of gangs no room can hold; an unsized gang's pod affinity);
- `admission`: the read-only warning of `/mutate` when no room has space for a member's gang now (admission
  writes no record: a request that no pod follows changes nothing);
- `ledger`: the gang records (which room each unbound gang was promised), kept in the Kubernetes API (the
  `GangLedger` object `kgwe-gangs`) with compare-and-swap on its resourceVersion;
- `planning`: the pure plan from a cluster model and the records: records gangs whose members exist,
  promises rooms, re-plans waiting gangs, decides releases and drops records;
- `controller`: the leader's loop, the one writer of records: stores the plan, then pins and ungates
  complete gangs and posts Events;
- `native`: kube-scheduler's own gang scheduling where the Workload API is served (Kubernetes 1.36): the
  PodGroup a member joins at admission, and the Workload and PodGroup the controller makes at release;
- `view`: what `kgwe gangs`, `/api/v1/gangs` and the web page show (over a cluster directory, which keeps
  no records, from records planned for the view).
"""
