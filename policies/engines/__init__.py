"""Policy engines behind one small interface: Rego embedded (regorus) or through an OPA server, CEL, the
aggregate module that gathers every policy's answers into one query, the Rego source checks, the
conformance suite against OPA's own engine, and the engines' health.
"""
