"""Names of the numerics checks that other modules look up: declared here once, free of torch imports."""

REL_L2_CHECK = "relative L2 error"  # against the fp32 reference; other oracles prefix it (e.g. "vs FlashInfer: ")
