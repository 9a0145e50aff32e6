"""Gate kind `loss_increase`: eval-loss cost of quantizing a cartridge, per layout, against BF16.

`params` (fields, lint), `measurements` (typed results), `runner` (imports torch; loaded only to run an
item), `render` (the sign-off page's plot and payload table). Registered by the entry point
`loss_increase = "qualify.kinds.loss_increase:SPEC"`.
"""

from qualify.kinds.loss_increase.measurements import LossIncreaseMeasurements, bound_check_name
from qualify.kinds.loss_increase.params import LossIncreaseParams, lint, worker_group
from qualify.registry import GateKindSpec

SPEC = GateKindSpec(
    name="loss_increase",
    params=LossIncreaseParams,
    measurements=LossIncreaseMeasurements,
    runner="qualify.kinds.loss_increase.runner:run",
    render="qualify.kinds.loss_increase.render:RENDER",
    protects=(
        "A quantized cartridge layout must not raise eval loss beyond its bound; FP8 keys cost ~1 % "
        "on trained cartridges while ordinary benchmarks do not show it."
    ),
    lint=lint,
    worker_group=worker_group,
    # The layout this project serves; K16/V16 is the 0 <= 0 sanity check and says nothing on its own.
    primary_check=lambda check: check.name == bound_check_name("K16/V8"),
)
