"""Importers of the leaderboard: published results (``published``), problem-set folders (``pset``),
our demo with its predictions and baselines scored (``demo``).

Each turns an input on disk into releases, papers, snippets and evaluations, and raises
``ImportProblem`` (``common``) with every reason when the input cannot be imported. No re-exports
from the package: a name is imported from the module that defines it.
"""
