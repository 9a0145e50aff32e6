"""Mutation testing of the fused kernel: can the numerics gate fail on bugs it was not written around?

catalog      the declared mutants (source edits) and their YAML file, validated with file:line errors
materialize  a copy of the kernel package with one edit applied, and the digest of what was copied
execute      one gate run in a fresh process over one copy, classified killed / survived / ...
report       the mutation report (score, one row per mutant) and its signed DSSE envelope
cli          `qualify mutants`

The shipped kernel carries no fault switches: every wrong variant exists only as an edit in the catalog,
applied to a temporary copy that a child process imports ahead of the installed package.
"""
