"""`pytest gates/` collects the default gate files only, as `qualify run` with no files does.

gates/gpu/ and gates/examples/ hold gate files that run only when named (`qualify run gates/gpu/perf_slowed.yaml`):
a slowed-candidate check that must fail, and a smoke test that certifies nothing.
"""

collect_ignore = ["gpu", "examples"]
