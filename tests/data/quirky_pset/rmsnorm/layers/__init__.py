"""Normalisation layers of the quirky RMSNorm paper."""
