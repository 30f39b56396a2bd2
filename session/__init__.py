"""Run sessions: assemble bench and A/B runs (target, plan, oracle, probes, run directory,
summary) between the measurement packages and the command line."""
