"""Tools for working on this code base (not used by gate runs)."""
