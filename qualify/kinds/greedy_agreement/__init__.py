"""Gate kind `greedy_agreement`: the shared cartridge's serving layouts generate the reference's greedy tokens.

`params` (fields, lint), `measurements` (typed results), `runner` (one vLLM process per layout, several at once;
loaded only to run an item). Registered by the entry point `greedy_agreement = "qualify.kinds.greedy_agreement:SPEC"`.
"""

from qualify.kinds.greedy_agreement.measurements import GreedyAgreementMeasurements
from qualify.kinds.greedy_agreement.params import GreedyAgreementParams, lint, worker_group
from qualify.registry import GateKindSpec

SPEC = GateKindSpec(
    name="greedy_agreement",
    params=GreedyAgreementParams,
    measurements=GreedyAgreementMeasurements,
    runner="qualify.kinds.greedy_agreement.runner:run",
    protects=(
        "Behind the same cartridge and questions, each serving layout generates the reference's greedy tokens "
        "(a divergence is excused only at an exact tie of the reference's top two) and keeps its log-probabilities "
        "within a stated mean difference; each divergence is reported with the reference's margin there."
    ),
    lint=lint,
    worker_group=worker_group,
)
