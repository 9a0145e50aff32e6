"""Gate kind `perf_nonregression`: a candidate implementation against a baseline on timing ratios.

`params` (fields, lint), `measurements`, `runner` (fresh worker processes; loaded only to run an item),
`render` (ratio plots), `summary` (`qualify perf-summary`: comparison table and run-to-run check of reports).
Measurement code: the `qualify.perf` domain package. Registered by the entry point
`perf_nonregression = "qualify.kinds.perf_nonregression:SPEC"`.
"""

from qualify.kinds.perf_nonregression.measurements import PerfNonRegressionMeasurements
from qualify.kinds.perf_nonregression.params import PerfNonRegressionParams, lint, worker_group
from qualify.registry import GateKindSpec

SPEC = GateKindSpec(
    name="perf_nonregression",
    params=PerfNonRegressionParams,
    measurements=PerfNonRegressionMeasurements,
    runner="qualify.kinds.perf_nonregression.runner:run",
    render="qualify.kinds.perf_nonregression.render:RENDER",
    protects=(
        "The shared K16/V8 path must be faster than copying a BF16 cartridge into every request and serving "
        "it with FlashInfer, and must not get slower from one release to the next; decided on the CI of the "
        "timing ratio, since single timings on shared GPUs are noise."
    ),
    lint=lint,
    worker_group=worker_group,
)
