"""The typed measurements of one `kernel_numerics` item: the cell it ran and the errors it measured.

`max_rel_l2` is the threshold of the relative-L2 checks and is stated there only; rtol and atol, which
define the violation count, are the item's parameters.
"""

from __future__ import annotations

from typing import Any, Literal

from qualify.schema.models import MeasurementModel


class SecondOracle(MeasurementModel):
    name: str
    max_abs_err: float
    rel_l2: float


class KernelNumericsMeasurements(MeasurementModel):
    check: Literal["kernel", "contract", "reference"]
    phase: str
    live_v: str
    cartridge_v: str
    page_size: int
    cartridge_len: int
    sink: bool
    head_dim: int
    batch: str  # the batch's id
    q_lens: list[int] | None
    live_lens: list[int]
    kv_layout: str
    # Whether the cell is outside the kernel's contract, so that a rejection is what passes.
    contract: bool
    seeds: list[int]
    case: str | None = None  # check: contract
    expected_error: str | None = None  # contract cells: the documented error
    raised: list[str] | str | None = None  # what was raised instead of serving the cell
    violation: str | None = None  # kernel cells outside the contract: which rule they break
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    rel_l2: float | None = None
    nan_count: int | None = None
    violations: int | None = None  # elements outside atol + rtol*|ref|
    second_oracle: SecondOracle | None = None
    kernel: dict[str, Any] | None = None  # identity of the compiled kernel (config, cubin and source digests)
    # Relative L2 errors against the float64 reference of the kernel and of the accepted oracle (`oracle_f64`:
    # FlashInfer, or the fp32 reference rounded to the output dtype), in the repeat closest to its bound.
    rel_l2_f64: float | None = None
    oracle_rel_l2_f64: float | None = None
    oracle_f64: str | None = None
    # Output elements whose bits differ between two launches of one plan (summed over repeats).
    relaunch_mismatches: int | None = None
