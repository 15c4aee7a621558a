"""Policy engines behind one small interface: Rego embedded (regorus) or through an OPA server, CEL, the
Rego source checks, the conformance suite against OPA's own engine, and the engines' health.
"""
