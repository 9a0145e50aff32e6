"""Runners execute one gate item each; they are imported only when an item of their kind runs."""
