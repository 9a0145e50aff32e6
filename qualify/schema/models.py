"""Pydantic models of a gate file. Validation is strict: unknown keys and wrong types are errors."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

GATE_FILE_VERSION = 1

# What a gate may require of the host; `qualify list` shows which of these this host has.
Requirement = Literal["cpu", "cuda", "sm90", "triton", "flashinfer", "vllm", "lm_eval", "ncu"]

GATE_ID_PATTERN = r"^[a-z0-9][a-z0-9_.-]*$"


class StrictModel(BaseModel):
    """Base of every gate-file model: no extra keys, no silent type coercion."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class KindParams(StrictModel):
    """Base of each gate kind's own fields (one subclass per kind, registered with its runner)."""


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
    defaults: dict[str, Any] = Field(default_factory=dict)
    workloads: dict[str, Workload] = Field(default_factory=dict)
    gates: list[dict[str, Any]] = Field(min_length=1)
