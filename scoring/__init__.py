"""The scoring layer: the one seam between the site and the engine (``benchmark_core``).

Rooms: ``sandbox`` (which sandbox untrusted code gets, by trust level), ``results`` (the one writer
of ``SnippetResult`` rows), ``queue`` (the one module that talks to RQ / django-rq), and
``paper_store`` (paper files by content hash). Submissions, contributions and releases call in here;
this app imports none of their views.
"""
