"""When the client, not the server, shaped a run: the thresholds of ``client: limited``.

One owner for the numbers that ``summary.json`` (``probes.latency.client_health``), the
live display (``session.live_stats``) and the A/B conditions apply, in a module that
imports nothing: the live display needs them before the run, when nothing else of the
summary's statistics (pandas) is loaded yet.
"""

#: Dispatch lag p99 above which the client, not the server, shaped the run.
DISPATCH_LAG_LIMIT_S = 0.005
#: Share of one core at which the client's CPU counts as saturated.
CPU_SATURATION_SHARE = 0.9
#: How long the CPU share must stay saturated (seconds) to flag the run.
CPU_SUSTAIN_S = 3.0
