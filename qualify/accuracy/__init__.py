"""Ordinary accuracy benchmarks (lm-eval tasks) under each KV layout, for the `accuracy_floor` gate kind.

Heavy imports (torch, transformers, lm-eval, datasets) live in the submodules that need them, so importing this
package costs nothing at collection or lint time.
"""
