"""The models gates run against: typed specs from gate YAML and a loader for them."""

from qualify.models.loader import LoadedModel, load_causal_lm
from qualify.models.spec import ModelSpec, PathSpec, PypiGgufSpec, default_model_spec

__all__ = ["LoadedModel", "ModelSpec", "PathSpec", "PypiGgufSpec", "default_model_spec", "load_causal_lm"]
