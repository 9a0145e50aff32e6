"""Resampling statistics for the gates."""
