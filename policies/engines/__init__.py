"""Policy engines behind one small interface: Rego embedded (regorus) or through an OPA server, CEL, the
aggregate module that gathers every policy's answers into one query, the Rego source checks, the
conformance suite against OPA's own engine, and the engines' health.
"""

import os

# Set here, before any engine module loads regorus: with RUST_BACKTRACE set (developers' shells, CI images)
# and RUST_LIB_BACKTRACE not, Rust's std captures a backtrace for every error value a library makes, and
# regorus' parser makes and drops errors while it parses a module: 4-5x the CPU of each parse (pod.rego:
# 1.6 ms instead of 0.35), 15 % of a `kgwe review`. The captured text is appended to the message, which
# `rego.clean_error` cuts off anyway. Panics still print their backtrace (they follow RUST_BACKTRACE alone),
# and a RUST_LIB_BACKTRACE the user set is kept. docs/performance.md, "The command line's start-up".
if os.environ.get("RUST_BACKTRACE") and "RUST_LIB_BACKTRACE" not in os.environ:
    os.environ["RUST_LIB_BACKTRACE"] = "0"
