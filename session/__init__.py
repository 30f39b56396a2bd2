"""Run sessions: assemble bench and A/B runs (target, plan, oracle, probes, run directory,
summary) between the measurement packages and the command line."""

from runtime.deferred_ca import install as _defer_ca_loading

_defer_ca_loading()  # aiohttp loads the CA bundle on first TLS use, not at import
