"""Qualification reports: what a run measured and the provenance it ran under."""
