"""`pytest gates/` collects the default gate files only, as `qualify run` with no files does.

gates/gpu/, gates/examples/ and gates/slow/ hold gate files that run only when named
(`qualify run gates/gpu/perf_slowed.yaml`): a slowed-candidate check that must fail, and smoke tests that certify
nothing (their items are underpowered or vacuous, so they can never PASS).
"""

collect_ignore = ["gpu", "examples", "slow"]
