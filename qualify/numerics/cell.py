"""One cell of the kernel-numerics matrix: shape, dtypes, tolerances and the check mode (`kernel_numerics` fields).

The model lives here, below both the gate kind and the check modes that read it, so the domain package never
imports the kind. Three checks, chosen by `check:`
  kernel     the fused kernel (GPU) vs the fp32 reference on fresh random inputs; cells whose shape is
             outside the kernel's documented contract (e.g. 632 positions on 16-token pages) must be
             rejected with the documented error instead.
  contract   a named unsupported layout (`case:`) must raise the documented error, never be served.
  reference  host-only: the fp32 reference over cartridge + paged live KV agrees with an independent
             float64 computation over the ordinary injection layout (the cartridge copied into pages),
             which checks paging, indexing and masking without a GPU.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from qualify.schema.models import KindParams, StrictModel


class CartridgeShape(StrictModel):
    """Cartridge length; `sink` makes position 0 a dominant attention sink as in trained cartridges."""

    id: str
    length: int = Field(ge=0)
    sink: bool = False


class BatchShape(StrictModel):
    """Live tokens per request; `q_lens` are the prefill query lengths (decode uses one query each)."""

    id: str
    live_lens: list[int] = Field(min_length=1)
    q_lens: list[int] | None = None

    @model_validator(mode="after")
    def _lengths(self) -> BatchShape:
        if self.q_lens is not None and len(self.q_lens) != len(self.live_lens):
            raise ValueError(f"q_lens has {len(self.q_lens)} entries, live_lens {len(self.live_lens)}")
        return self


class NumericsEnvelope(StrictModel):
    """The serving shapes a kernel gate must qualify; the compiler turns it into `batch` cells
    (`qualify.numerics.envelope_cells`): every region of the kernel's dispatch at its edges, plus seeded random
    ragged batches. The gate fixes `phase`, `head_dim`, `num_qo_heads` and `num_kv_heads` for it."""

    max_batch: int = Field(default=256, ge=1, le=4096)  # decode: requests in one step
    min_batch: int = Field(default=1, ge=1, le=4096)  # decode: the smallest step the gate is about
    max_live: int = Field(default=4096, ge=1, le=1 << 17)  # decode: the longest live suffix
    max_query_tokens: int = Field(default=4096, ge=2, le=1 << 17)  # prefill: query tokens of one batch
    random_batches: int = Field(default=4, ge=0, le=64)
    seed: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _batches(self) -> NumericsEnvelope:
        if self.min_batch > self.max_batch:
            raise ValueError(f"min_batch {self.min_batch} is above max_batch {self.max_batch}")
        return self


ContractCase = Literal["misaligned_cartridge", "fp8_keys", "zero_live", "unsupported_head_dim", "non_sm90"]


class KernelNumericsParams(KindParams):
    # max_rel_l2 is the threshold of the relative-L2 checks; rtol and atol define the violation measure
    # (elements outside atol + rtol*|ref|, whose threshold is 0), so they stay recorded as parameters.
    threshold_fields: ClassVar[dict[str, Any]] = {"max_rel_l2": True}

    check: Literal["kernel", "contract", "reference"] = "kernel"
    phase: Literal["prefill", "decode"] = "decode"
    live_v: Literal["bf16", "fp8_e4m3"] = "bf16"
    cartridge_v: Literal["fp8_e4m3", "bf16"] = "fp8_e4m3"
    page_size: int = 8
    cartridge: CartridgeShape
    batch: BatchShape
    head_dim: int = 128
    num_qo_heads: int = Field(default=32, ge=1)
    num_kv_heads: int = Field(default=8, ge=1)
    # How the live pages are stored: K and V apart (vLLM's split caches), FlashInfer's combined (pages, 2, ...) cache,
    # or one K-then-V row per token and head as the serving plugin's vLLM cache holds them (a head's keys 2 D BF16
    # elements from the next, or 1.5 D with FP8 values, which sit 3 D bytes apart).
    kv_layout: Literal["separate", "combined", "interleaved"] = "separate"
    fp8_scale: bool = True
    # NaN in every cache slot no request owns (cartridge_attn.AttentionProblem.poison_free_slots): reading past a
    # request's end, a wrong page, or a whole-page load whose tail reaches P x V then fails the cell.
    poison_free_slots: bool = True
    # Shift every real key's logit by this many nats (<= 0). A key that is not part of the problem, such as a
    # zero-filled pad past the cartridge's end, keeps its logit of 0: at -30 it outweighs every real key and moves
    # the output to ~0, where with ordinary logits it would hide at ~1/n inside the tolerance.
    negative_logits: float = Field(default=0.0, le=0.0, ge=-60.0)
    # Weight the positions a kernel most likely gets wrong (both sides of the cartridge/live boundary, and
    # position 0 of a sink cartridge) so that a one-position mistake cannot hide inside the tolerance.
    emphasize_boundary: bool = True
    repeats: int = Field(default=3, ge=1, le=100)
    rtol: float = Field(default=3e-2, gt=0)
    atol: float = Field(default=3e-2, gt=0)
    max_rel_l2: float = Field(default=1.5e-2, gt=0)
    # Against a float64 reference the kernel may be at most `oracle_factor` times as far off as an accepted
    # implementation on the same inputs (FlashInfer where it runs, else the fp32 reference rounded to the
    # output dtype), plus `oracle_eps`: a bound tied to what correct code achieves, not only a fixed tolerance.
    oracle_factor: float = Field(default=3.0, gt=0)
    oracle_eps: float = Field(default=2e-4, ge=0)
    case: ContractCase | None = None
    envelope: NumericsEnvelope | None = None
    second_oracle: Literal["auto", "flashinfer", "none"] = "auto"
    # The prefill kernel the wrapper is built with (`CartridgeAttention(prefill_impl=...)`), named so that each
    # prefill the dispatch can take (the Gluon one on SM90 with Triton 3.6, the Triton one elsewhere) is qualified
    # by its own cells side by side. Decode cells always run the Triton kernel.
    prefill_impl: Literal["triton", "gluon"] = "triton"
    # The wrapper's decode cascade (`CartridgeAttention(decode_cascade=...)`): None leaves it to the dispatch, True
    # qualifies the cascade side by side before the dispatch chooses it by itself, False the fused walk alone.
    decode_cascade: bool | None = None
    device: Literal["auto", "cuda", "cpu"] = "auto"
