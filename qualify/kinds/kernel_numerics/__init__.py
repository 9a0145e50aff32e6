"""Gate kind `kernel_numerics`: the fused cartridge kernel against an fp32 reference, and its contract.

`params` (lint; the fields are the numerics cell, `qualify.numerics.cell`), `measurements`, `runner` (dispatches
the `check:` mode to the `qualify.numerics` domain package; loaded only to run an item), `render` (the matrix
grid). Registered by the entry point `kernel_numerics = "qualify.kinds.kernel_numerics:SPEC"`.
"""

from qualify.kinds.kernel_numerics.measurements import KernelNumericsMeasurements
from qualify.kinds.kernel_numerics.params import KernelNumericsParams, lint
from qualify.numerics.check_names import REL_L2_CHECK
from qualify.numerics.envelope_reads import ENVELOPE_READS
from qualify.registry import GateKindSpec

SPEC = GateKindSpec(
    name="kernel_numerics",
    params=KernelNumericsParams,
    measurements=KernelNumericsMeasurements,
    runner="qualify.kinds.kernel_numerics.runner:run",
    render="qualify.kinds.kernel_numerics.render:RENDER",
    protects=(
        "The fused cartridge kernel may ship only if it matches an fp32 reference on every shape it serves "
        "and rejects, never silently serves, the layouts it does not support."
    ),
    lint=lint,
    primary_check=lambda check: check.name == REL_L2_CHECK,
    generate_axes="qualify.numerics.envelope_cells:envelope_axes",
    generate_reads=ENVELOPE_READS,
    describe="qualify.numerics.dispatch_view:describe_cell",
    # Correctness of launches of at most a few GiB, timed by nothing: workers may share a GPU.
    shares_gpu=True,
)
