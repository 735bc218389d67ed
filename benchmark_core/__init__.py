"""ResearchCodeBench scoring engine: framework-free, usable without the site.

Layers (EvalPlus-style): pure functions (annotation, masking, completions, errors, scoring) ->
file I/O (problemset, predictions, runner with sandboxes) -> the CLI (``python -m benchmark_core``).
"""
__version__ = "0.1.0"
