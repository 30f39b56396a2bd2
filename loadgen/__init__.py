"""How requests are sent and timed (``docs/ARCHITECTURE.md``).

Entry points (import them from their modules; this package imports nothing itself, so
that readers of run files do not pay for the HTTP client):

* ``loadgen.run.run_load(plan, target, run_dir, clock, options, observer) -> LoadResult``
  (or ``LoadRun(...).run()`` to keep the partial result when cancelled);
* ``loadgen.target.api_key_from_env()``.

Modules: ``sse`` (incremental SSE parser), ``adapters`` (one per API: request bodies and
stream readers), ``exchange`` (one request over the wire, error classes), ``arrivals``
(read timestamps), ``sessions`` (multi-turn histories), ``cache`` (cache protocol),
``health`` (client monitor), ``records``. Which server is behind an endpoint is the
probes' question (``probes.detect``); the clock and the open-loop timer are
``runtime``'s, the run directory ``runfmt``'s.
"""

from runtime.deferred_ca import install as _defer_ca_loading

_defer_ca_loading()  # aiohttp loads the CA bundle on first TLS use, not at import
