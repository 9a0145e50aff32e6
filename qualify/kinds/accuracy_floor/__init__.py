"""Gate kind `accuracy_floor`: an ordinary benchmark under a quantized KV layout keeps a fraction of its BF16 score.

`params` (fields, lint with the power check), `measurements`, `runner` (lm-eval; loaded only to run an item),
`render` (the accuracy plot). Measurement code: the `qualify.accuracy` domain package. Registered by the entry
point `accuracy_floor = "qualify.kinds.accuracy_floor:SPEC"`.
"""

from qualify.kinds.accuracy_floor.measurements import AccuracyFloorMeasurements
from qualify.kinds.accuracy_floor.params import AccuracyFloorParams, lint, worker_group
from qualify.registry import GateKindSpec

SPEC = GateKindSpec(
    name="accuracy_floor",
    params=AccuracyFloorParams,
    measurements=AccuracyFloorMeasurements,
    runner="qualify.kinds.accuracy_floor.runner:run",
    render="qualify.kinds.accuracy_floor.render:RENDER",
    protects=(
        "An ordinary benchmark under a quantized KV layout keeps its floor (a fraction of the BF16 score on the same "
        "items), and the report says whether the sample could resolve that floor at all."
    ),
    lint=lint,
    worker_group=worker_group,
)
