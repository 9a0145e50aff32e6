"""Convert a GGUF checkpoint once into a Hugging Face safetensors directory, cached by the GGUF's sha256.

Dequantizing GGUF through transformers takes tens of seconds; loading the converted safetensors takes
about one. The cache key is the file's content hash, so a changed package can never reuse a stale cache.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from qualify.cache_dir import cache_root
from qualify.errors import DataError
from qualify.hashing import sha256_file

_CONVERSION_RECORD = "qualify-conversion.json"


@dataclass(frozen=True)
class ConvertedModel:
    directory: Path
    gguf_sha256: str
    conversion_seconds: float  # time the one-off conversion took (recorded when it ran)
    converted_now: bool


def _convert(gguf_path: Path, out_dir: Path) -> None:
    # Imported lazily: transformers is slow to import and only needed on a cache miss.
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    directory, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    config = AutoConfig.from_pretrained(directory, gguf_file=name)
    # `from_pretrained(gguf_file=...)` needs `accelerate`, which the suite does not depend on; building the
    # model from its config and loading transformers' own dequantized GGUF state dict is equivalent.
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    state = load_gguf_checkpoint(str(gguf_path), return_tensors=True, model_to_load=model)["tensors"]
    result = model.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()}, strict=False)
    tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
    missing = set(result.missing_keys) - tied
    if missing or result.unexpected_keys:
        raise DataError(
            str(gguf_path),
            f"GGUF tensors do not match {type(model).__name__}: missing {sorted(missing)}, "
            f"unexpected {sorted(result.unexpected_keys)}",
        )
    model.tie_weights()
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)


def converted_gguf(gguf_path: Path, name: str | None = None) -> ConvertedModel:
    """Return the cached safetensors conversion of `gguf_path`, converting it first if needed.

    The conversion is written to a temp dir beside the cache entry and renamed into place, so an
    interrupted conversion leaves no entry that a later run would mistake for a complete one.
    """
    if not gguf_path.is_file():
        raise DataError(str(gguf_path), "GGUF file not found")
    digest = sha256_file(gguf_path)
    stem = name or gguf_path.name.removesuffix(".gguf")
    target = cache_root() / "models" / f"{stem}-{digest[:16]}"
    record = target / _CONVERSION_RECORD
    if record.is_file():
        meta = json.loads(record.read_text())
        return ConvertedModel(target, digest, float(meta["conversion_seconds"]), converted_now=False)

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        start = time.perf_counter()
        _convert(gguf_path, tmp)
        seconds = time.perf_counter() - start
        meta = {"gguf": str(gguf_path), "gguf_sha256": digest, "conversion_seconds": round(seconds, 3)}
        # Written last: its presence is what marks the entry complete.
        (tmp / _CONVERSION_RECORD).write_text(json.dumps(meta, indent=2) + "\n")
        if target.exists():
            # Only reachable if someone hand-edited the cache: an entry without its record is not trusted.
            shutil.rmtree(target)
        try:
            tmp.rename(target)
        except OSError:
            # A concurrent process finished first; its entry is equally valid, keep it.
            if not (target / _CONVERSION_RECORD).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return ConvertedModel(target, digest, seconds, converted_now=True)
