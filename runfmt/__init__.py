"""The run format: the run directory's files, their names and their readers and writers.

``runfmt.names`` names every file, ``runfmt.rundir`` writes the crash-safe tables
(``runfmt.journal`` is their line format) and ``runfmt.tables`` declares each table's
schema and reads them back through ``RunTables`` (parquet, falling back to the
journals). A low package: the load generator, the probes, the diagnosis, the session and
the CLI all read and write runs through it, and it imports nothing of theirs.
"""
