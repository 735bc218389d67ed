"""Optimisers of the Lion demo paper."""
