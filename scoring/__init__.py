"""The scoring layer: the one seam between the site and the engine (``benchmark_core``).

Rooms: ``evaluate`` (scoring a paper: the one operation, and the only caller of the engine's
``run_tasks``), ``sandbox`` (which sandbox untrusted code gets, by trust level), ``results`` (the one
writer of ``SnippetResult`` rows), ``jobs`` and ``models`` (the one job model and its one attempt),
``queue`` (the one module that talks to RQ / django-rq), ``health`` (environment health),
``paper_store`` (paper files by content hash) and ``unzip`` (safe unpacking). It imports the domain
(``catalog``) and nothing above it: submissions, contributions and the pages call in here.
"""
