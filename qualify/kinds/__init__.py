"""The built-in gate kinds, one package each (fields and lint, runner, typed measurements, render hook).

Nothing imports this package as a whole: each kind is found through its `qualify.gate_kinds` entry point
(see `qualify.registry`), exactly as a third-party kind is.
"""
