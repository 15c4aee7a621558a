"""The policy runtime: what the webhook asks of the policies per request, and the set it asks them of.

`policy_runtime` (PolicyRuntime, build_runtime) is the entry; it is made of the set's loading
(`reloading`), the CEL part of a request (`cel_phase`), the Rego part (`rego_phase`), the answers
remembered for pods alike in what the policies read (`memo_keys`, `answer_memo`), and what it answers
(`outcomes`), over the state they share (`base`). `testing` is `kgwe policy test`, which runs the runtime.
"""
