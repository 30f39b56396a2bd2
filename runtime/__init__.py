"""Process-level helpers shared by the load generator, the probes and the simulator: the run
clock, precise sleeps, child processes that die with their parent and are stopped gracefully,
aiohttp's CA bundle loaded on first TLS use (``deferred_ca``),
how a command stops on a signal, what never reaches an output, and the one quantile
definition (``runtime.quantiles``) that every package computes its percentiles with.
A leaf package: it imports nothing else of the project."""
