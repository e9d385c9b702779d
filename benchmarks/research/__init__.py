"""Paper research: the seeds' claims re-tested (``claims.py`` runs and reports them).

The modules import ``_common`` and the other benchmark scripts from ``benchmarks/``,
which must be on ``sys.path`` (``claims.py`` puts it there)."""
