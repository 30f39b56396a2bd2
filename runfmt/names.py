"""The names in a run directory, each defined once: its JSON documents and its tables.

A table is ``<name>.jsonl`` (the crash-safe journal) and, once the run closed,
``<name>.parquet`` (see ``runfmt.rundir``); each table's columns are ``runfmt.tables``'.
"""

from __future__ import annotations

#: What a bench run was (``runfmt.runinfo``), written at its start and again at its end.
RUN_JSON = "run.json"
#: The run's figures: latencies, throughput, goodput, prefix cache, client, server.
SUMMARY_JSON = "summary.json"
#: The hypothesis checklist ``prefillscope diagnose`` writes into the run directory.
DIAGNOSIS_JSON = "diagnosis.json"
#: The verdict of a chunk-size A/B, in the A/B folder (its trials are run directories).
AB_JSON = "ab.json"
#: The verdict of a tenant-isolation experiment, in its own folder (``runfmt.isolation``).
ISOLATION_JSON = "isolation.json"
#: The curve of a sweep (``runfmt.sweep``), in the sweep folder beside its points' runs.
SWEEP_JSON = "sweep.json"

#: One row per request: times from the intended send, tokens, status.
REQUESTS_TABLE = "requests"
#: One row per streamed chunk of a request (the per-token times).
CHUNKS_TABLE = "chunks"
#: The load generator's own health: event-loop lag, CPU.
CLIENT_TABLE = "client"
#: The server's ``/metrics`` samples (or the Prometheus series read for them).
SERVER_METRICS_TABLE = "server_metrics"
#: The GPU samples (NVML).
GPU_TABLE = "gpu"
#: The probes' state changes: started, failed, recovered, lost.
EVENTS_TABLE = "probe_events"


#: Where the worker processes of a run journal their shards (``shards/<k>/<table>.jsonl``),
#: merged into the run's own tables as the run ends. A run whose parent was killed keeps
#: the folder, and its rows are read from there.
SHARDS_DIR = "shards"
#: The column of the ``client`` table that says which worker took a sample (runs of
#: worker processes only: each worker's loop is a core of its own).
WORKER_COLUMN = "worker"


def journal_file(table: str) -> str:
    """The file of a table's crash-safe journal, appended while the run goes on."""
    return f"{table}.jsonl"


def parquet_file(table: str) -> str:
    """The file a table's journal is compacted into when the run closes."""
    return f"{table}.parquet"
