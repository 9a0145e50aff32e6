"""Launching the kernel under test: where it runs, one NaN-poisoned launch, and its source identity."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from qualify.errors import QualifyError
from qualify.results import InputRef

if TYPE_CHECKING:
    from qualify.numerics.cell import KernelNumericsParams


def kernel_device(p: KernelNumericsParams) -> torch.device:
    """The cell's device: the current GPU, or the CPU when the kernel is interpreted (tests only)."""
    import cartridge_attn._kernel as K

    if p.device == "cpu" or (p.device == "auto" and not torch.cuda.is_available()):
        if not K.INTERPRETED:
            raise QualifyError(
                "the fused kernel needs a CUDA GPU; on a CPU host it runs only under TRITON_INTERPRET=1 (tests)"
            )
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def run_fused(pr: Any, prefill_impl: str = "triton", decode_cascade: bool | None = None) -> tuple[torch.Tensor, Any]:
    """Plan and launch the fused kernel on problem `pr` with a wrapper whose prefill is `prefill_impl` and whose
    decode cascade is `decode_cascade`; returns (output, the planned wrapper)."""
    from cartridge_attn import CartridgeAttention

    attn = CartridgeAttention(prefill_impl=prefill_impl, decode_cascade=decode_cascade)
    attn.plan(*pr.page_table(), device=pr.q.device, **pr.plan_kwargs())
    return launch(attn, pr), attn


def launch(attn: Any, pr: Any) -> torch.Tensor:
    """One launch of a planned wrapper into a NaN-poisoned output: an element the kernel fails to write stays
    NaN and fails the cell. A decode cascade's states are poisoned too: a live walk that reads them before the
    cascade has written them merges NaN."""
    from cartridge_attn import poison_cascade_states

    out = torch.full_like(pr.q, float("nan"))
    poison_cascade_states(attn)
    attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, pr.paged_kv, out=out, **pr.run_kwargs())
    if pr.q.is_cuda:
        torch.cuda.synchronize()
    return out


def kernel_inputs(impl: str = "triton") -> list[InputRef]:
    """The source of implementation `impl`'s kernels as qualified inputs, so the report's subjects pin what was
    measured (the Triton implementation's decode cascade has a kernel file of its own; the Gluon prefill reads what
    its host side hands it, an FP8 cartridge's FP16 expansion, so that file is pinned beside it)."""
    from cartridge_attn.identity import source_path, source_sha256

    from qualify.hashing import sha256_file

    sources = [impl, "cascade"] if impl == "triton" else [impl]
    refs = [
        InputRef(f"cartridge_attn/{source_path(s).name}", str(source_path(s)), source_sha256(s), "kernel-source")
        for s in sources
    ]
    if impl == "gluon":
        host = source_path(impl).with_name("gluon_host.py")
        refs.append(InputRef(f"cartridge_attn/{host.name}", str(host), sha256_file(host), "kernel-source"))
    return refs
