"""All-or-nothing gangs in one NVLink room with the unmodified kube-scheduler (SPEC section 8).

A gang is the live pods (neither finished nor terminating) of one namespace with the same `kgwe.io/gang`
and a `kgwe.io/gang-size` of N; a job restarted under the same name is a new run of the gang, never
completed by the pods of the old one (docs/gangs.md, "Restarts").
The pieces, in the order a gang meets them:

- `spec`: names, the bounded parse of `kgwe.io/gang-size`, a pod's gang membership;
- `rooms`: where a gang can go (a multi-node NVLink clique, or one node's NVLink domain), what is free
  there, and the best-fit choice that counts capacity promised to other unbound gangs as used;
- `placement`: the pure part of the placement plan (label, gate, refusal of gangs no room can hold);
- `ledger`: the gang records (which room each unbound gang was promised), behind one compare-and-swap
  store contract with three stores: memory, a file (YAML directory mode), the API (a `GangLedger`);
- `admission`: the record written at `/mutate` of a gang's first member;
- `controller`: the leader's loop that pins and ungates complete gangs, re-plans waiting ones, and
  releases records;
- `view`: what `kgwe gangs`, `/api/v1/gangs` and the web page show.
"""
