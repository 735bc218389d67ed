"""Reads of the leaderboard app, for the pages (leaderboard.views) and the read API (leaderboard.api).

One module a concern; import the one you need (this package re-exports nothing):

- ``caching``: ``cached`` (a read kept in Django's cache) and ``release_version``, the part of every key
  that moves with each write of a release;
- ``release_info``: releases for the pages (the one a paper's page shows, the list with counts,
  citation, a paper of a release);
- ``boards``: the tables (overall and contamination-safe leaderboards, a paper's board, heatmap, error
  categories, ablation, each model after its own cutoff), their figures and intervals computed by
  ``benchmark_core.scoring`` from stored totals;
- ``details``: a model and its evaluation cards, a paper's snippet tree, a snippet's verdicts and one
  model's drill-down, an evaluation's raw outputs;
- ``paper_files``: what is read from the papers' folders on disk (the masked file, the release's tasks).

The rules they apply are the domain's, in ``catalog``: which evaluations a release shows and ranks,
what this site can score (``catalog.ranking``), who may see a release (``catalog.visibility``), pages
of long tables (``catalog.tables``). Every selector reads stored aggregates (Evaluation fields written by catalog.aggregates), never the
SnippetResult rows of a whole release, and issues a number of queries that does not grow with the number
of models. Selectors return plain dataclasses; unknown objects raise the model's ``DoesNotExist`` (views
turn it into a 404). Query parameters are parsed by ``leaderboard.query``.
"""
