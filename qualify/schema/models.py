"""Pydantic models of a gate file. Validation is strict: unknown keys and wrong types are errors."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

GATE_FILE_VERSION = 1

# What a gate may require of the host; `qualify list` shows which of these this host has.
Requirement = Literal["cpu", "cuda", "sm90", "triton", "gluon", "flashinfer", "vllm", "lm_eval", "ncu"]

GATE_ID_PATTERN = r"^[a-z0-9][a-z0-9_.-]*$"
VARIABLE_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"


class StrictModel(BaseModel):
    """Base of every gate-file model: no extra keys, no silent type coercion, no infinite or NaN number.

    A `.inf` or `.nan` threshold compares so that the gate can never fail (or never decide), so every float a
    gate file declares must be finite; pydantic then reports it at its place like any other field error.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class KindParams(StrictModel):
    """Base of each gate kind's own fields (one subclass per kind, registered with its runner).

    `threshold_fields` names (as a pydantic `exclude` spec, nested where needed) the fields that hold
    thresholds. A report stores each threshold once, in the check that used it, so `report_parameters`
    leaves them out of the item's `parameters`.
    """

    threshold_fields: ClassVar[dict[str, Any]] = {}

    def report_parameters(self) -> dict[str, Any]:
        """The fields as the report records them: JSON values, thresholds left to the checks."""
        return self.model_dump(mode="json", exclude=self.threshold_fields)


class MeasurementModel(BaseModel):
    """Base of a gate kind's typed measurements (and of their parts), as written into the report.

    Runners build one and the report stores its JSON dump. Reading tolerates fields it does not know (a
    report written by an older version may carry fields since dropped), while the report schema generated
    from the model admits none, so a new report cannot carry what the model does not declare.
    """

    model_config = ConfigDict(extra="ignore", frozen=True, json_schema_extra={"additionalProperties": False})

    @classmethod
    def written(cls, data: dict[str, Any]) -> Self:
        """Validate what a runner is about to write: here an unknown field is an error, not ignored."""
        return cls.model_validate(data, context={"written": True})

    @model_validator(mode="before")
    @classmethod
    def _no_unknown_fields_when_written(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(info.context, dict) and info.context.get("written") and isinstance(data, dict):
            unknown = sorted(set(data) - set(cls.model_fields))
            if unknown:
                raise ValueError(f"{cls.__name__} has no fields {unknown}")
        return data


class Workload(StrictModel):
    """A model plus the artifacts it is qualified with; paths are relative to the gate file."""

    description: str | None = None
    model: dict[str, Any]
    cartridges: dict[str, str] = Field(default_factory=dict)
    eval_set: str | None = None


class GateHeader(BaseModel):
    """The fields every gate has; the rest of a gate's keys belong to its kind."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    id: str = Field(pattern=GATE_ID_PATTERN)
    kind: str
    requires: list[Requirement] = Field(default_factory=list)
    description: str | None = None
    matrix: dict[str, list[Any]] | None = None


HEADER_FIELDS = frozenset({"id", "kind", "requires", "description", "matrix"})
DEFAULTABLE_HEADER_FIELDS = frozenset({"requires", "description"})


class GateFileModel(StrictModel):
    suite: str = Field(min_length=1)
    version: Literal[1]
    description: str | None = None
    # Environment variables that `${NAME}` may expand (checked, secret names refused, in schema/interpolate.py).
    variables: list[Annotated[str, Field(pattern=VARIABLE_NAME_PATTERN)]] = Field(default_factory=list)
    defaults: dict[str, Any] = Field(default_factory=dict)
    workloads: dict[str, Workload] = Field(default_factory=dict)
    gates: list[dict[str, Any]] = Field(min_length=1)
