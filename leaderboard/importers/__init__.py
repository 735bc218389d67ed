"""Importers of the leaderboard: published results (``published``), problem-set folders (``pset``).

Each turns an input on disk into releases, papers, snippets and evaluations, and raises
``ImportProblem`` (``common``) with every reason when the input cannot be imported.
"""
