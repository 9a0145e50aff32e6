"""`cartridge_attn.cache_write.write_live_kv`: a step's K and V into vLLM's paged cache, V in BF16 or FP8.

The pages are strided views of one vLLM-style cache tensor ``kv`` of logical shape
``(num_blocks, H, block, 2 * D)`` stored NHD, K in the first ``D`` lanes and V in the rest (FP8 V uses the
first ``D`` bytes of its lanes). The whole cache is poisoned first and compared byte for byte afterwards:
written slots hold the inputs, every other byte (other slots, padding tokens, key/value rows past
``slot_mapping``, the unused half of an FP8 V lane) keeps its poison.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from _serving_kernels import FP8, FP8_NAN_BYTE, ROOT, randint, run_file_in_fresh_process, seeded_generator
from cartridge_attn import UnsupportedLayoutError, api
from cartridge_attn.cache_write import write_live_kv

BF16 = torch.bfloat16
D = 64
FP8_MAX = 448.0


class Cache:
    """A vLLM-style cache and its K / V page views, ``(num_blocks, block, H, D)`` each."""

    def __init__(self, num_blocks: int, block: int, heads: int, v_dtype: torch.dtype, device: torch.device):
        self.raw = torch.full((num_blocks, block, heads, 2 * D), float("nan"), dtype=BF16, device=device)
        if v_dtype == FP8:
            self.raw[..., D:].view(torch.uint8).fill_(FP8_NAN_BYTE)
        self.v_dtype = v_dtype

    @staticmethod
    def views(raw: torch.Tensor, v_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        kv = raw.permute(0, 2, 1, 3)  # logical (num_blocks, H, block, 2D), NHD in memory
        pages = kv.transpose(1, 2)
        k_pages = pages[..., :D]
        v_pages = pages[..., D:].view(FP8)[..., :D] if v_dtype == FP8 else pages[..., D:]
        return k_pages, v_pages

    def pages(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.views(self.raw, self.v_dtype)


def to_fp8(v: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """What the cache must hold for V ``(T, H, D)``: (v / scale) clamped to +-448, rounded to E4M3."""
    return (v.float() / scale[None, :, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8)


def expected_cache(
    cache: Cache, key: torch.Tensor, value: torch.Tensor, slots: torch.Tensor, v_scale: torch.Tensor | None
) -> torch.Tensor:
    """The poisoned cache with exactly the valid slots written (computed with PyTorch indexing)."""
    raw = cache.raw.cpu().clone()
    k_pages, v_pages = Cache.views(raw, cache.v_dtype)
    block = k_pages.shape[1]
    v_stored = to_fp8(value, v_scale) if cache.v_dtype == FP8 else value
    for t, s in enumerate(slots.tolist()):
        if s < 0:
            continue
        k_pages[s // block, s % block] = key[t]
        v_pages[s // block, s % block] = v_stored[t]
    return raw


def assert_cache_equal(got: torch.Tensor, want: torch.Tensor) -> None:
    diff = got.view(torch.uint8) != want.view(torch.uint8)
    assert not diff.any(), f"{int(diff.sum())} cache bytes differ; first at {diff.nonzero()[0].tolist()}"


def slot_mapping(
    gen: torch.Generator, n_tokens: int, n_slots: int, n_pad: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """Distinct random slots with ``n_pad`` padding entries (-1) in random places."""
    slots = torch.randperm(n_slots, generator=gen)[: n_tokens - n_pad].tolist() + [-1] * n_pad
    order = torch.randperm(n_tokens, generator=gen).tolist()
    return torch.tensor([slots[i] for i in order], dtype=dtype, device=device)


def qkv_views(gen: torch.Generator, rows: int, heads: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """key and value as vLLM hands them over: views into one fused (rows, 3, H, D) projection output."""
    qkv = torch.randn(rows, 3, heads, D, generator=gen).to(BF16).to(device)
    return qkv[:, 1], qkv[:, 2]


def pow2_scales(gen: torch.Generator, heads: int, device: torch.device) -> torch.Tensor:
    """Per-head scales that are powers of two, so that v / scale is exact in every float format."""
    return (2.0 ** torch.randint(-4, 5, (heads,), generator=gen).float()).to(device)


@pytest.mark.parametrize("v_dtype", [BF16, FP8], ids=["v-bf16", "v-fp8"])
@pytest.mark.parametrize("block", [8, 16])
@pytest.mark.parametrize("slot_dtype", [torch.int64, torch.int32])
def test_written_slots_hold_inputs_and_nothing_else_changes(
    v_dtype: torch.dtype, block: int, slot_dtype: torch.dtype, kernel_device: torch.device, request
) -> None:
    gen = seeded_generator(request.node.nodeid)
    heads, num_blocks = randint(gen, 1, 4), randint(gen, 3, 6)
    n_tokens, n_pad = randint(gen, 5, 20), randint(gen, 1, 3)
    extra_rows = randint(gen, 1, 4)  # key/value have more rows than slot_mapping: those must not be written
    cache = Cache(num_blocks, block, heads, v_dtype, kernel_device)
    key, value = qkv_views(gen, n_tokens + extra_rows, heads, kernel_device)
    slots = slot_mapping(gen, n_tokens, min(num_blocks * block, 4 * n_tokens), n_pad, slot_dtype, kernel_device)
    v_scale = None
    if v_dtype == FP8:
        # Values exactly representable after scaling (any correct rounding keeps them), and some far
        # outside +-448 * scale in both signs, which must saturate.
        v_scale = pow2_scales(gen, heads, kernel_device)
        exact = torch.randn(n_tokens + extra_rows, heads, D, generator=gen).to(FP8).float()
        exact = (exact * v_scale.cpu()[None, :, None]).to(BF16)
        big = torch.rand(exact.shape, generator=gen) < 0.1
        sign = torch.where(torch.rand(exact.shape, generator=gen) < 0.5, -1.0, 1.0)
        exact[big] = (sign * 4 * FP8_MAX * v_scale.cpu()[None, :, None].expand_as(exact))[big].to(BF16)
        value = exact.to(kernel_device)
    want = expected_cache(cache, key.cpu(), value.cpu(), slots.cpu(), None if v_scale is None else v_scale.cpu())
    write_live_kv(key, value, *cache.pages(), slots, v_scale)
    assert_cache_equal(cache.raw.cpu(), want)
    if v_dtype == FP8:
        _, v_pages = cache.pages()
        assert v_pages.float().abs().nan_to_num(0.0).max() == FP8_MAX, "values past the range must saturate at 448"


def _interpreter_fp8_rounding_is_broken() -> str | None:
    """Why the interpreter cannot round fp32 to E4M3 correctly here, or None when it can."""
    if not api.interpreter_usable():
        return None
    import triton
    import triton.language as tl

    @triton.jit
    def convert(x_ptr, y_ptr, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.store(y_ptr + i, tl.load(x_ptr + i).to(y_ptr.dtype.element_ty))

    # A carry into the next binade (7.875 -> 8), a tie to even (2.125 -> 2), ordinary values.
    x = torch.tensor([7.875, 2.125, 0.3, -1.0])
    y = torch.empty(4, dtype=FP8)
    convert[(1,)](x, y, N=4)
    if torch.equal(y.view(torch.uint8), x.to(FP8).view(torch.uint8)):
        return None
    return (
        f"the Triton {triton.__version__} interpreter's float32 -> float8e4nv conversion"
        " (triton/runtime/interpreter.py::_convert_float) rounds ties up and drops the carry into the exponent:"
        f" {x.tolist()} -> {y.float().tolist()}, PyTorch/SM90 give {x.to(FP8).float().tolist()};"
        " exact FP8 rounding is checked on the compiled kernel (CUDA hosts)"
    )


def test_fp8_rounding_of_arbitrary_values_matches_pytorch(kernel_device: torch.device, request) -> None:
    """Random V and random (non power of two) scales: every stored byte equals PyTorch's rounding."""
    reason = _interpreter_fp8_rounding_is_broken() if kernel_device.type == "cpu" else None
    if reason:
        pytest.skip(reason)
    gen = seeded_generator(request.node.nodeid)
    heads, block, num_blocks, n_tokens = 4, 16, 8, 100
    cache = Cache(num_blocks, block, heads, FP8, kernel_device)
    key, value = qkv_views(gen, n_tokens, heads, kernel_device)
    value = (value.float() * 300).to(BF16)  # some saturate
    v_scale = (0.05 + torch.rand(heads, generator=gen)).to(kernel_device)
    slots = slot_mapping(gen, n_tokens, num_blocks * block, 5, torch.int64, kernel_device)
    want = expected_cache(cache, key.cpu(), value.cpu(), slots.cpu(), v_scale.cpu())
    write_live_kv(key, value, *cache.pages(), slots, v_scale)
    assert_cache_equal(cache.raw.cpu(), want)


@pytest.mark.parametrize("v_dtype", [BF16, FP8], ids=["v-bf16", "v-fp8"])
def test_padding_only_and_empty_batches_write_nothing(v_dtype: torch.dtype, kernel_device: torch.device, request):
    gen = seeded_generator(request.node.nodeid)
    cache = Cache(3, 8, 2, v_dtype, kernel_device)
    before = cache.raw.clone()
    key, value = qkv_views(gen, 6, 2, kernel_device)
    v_scale = torch.ones(2, device=kernel_device) if v_dtype == FP8 else None
    write_live_kv(key, value, *cache.pages(), torch.full((6,), -1, dtype=torch.int64, device=kernel_device), v_scale)
    write_live_kv(key, value, *cache.pages(), torch.empty(0, dtype=torch.int64, device=kernel_device), v_scale)
    assert_cache_equal(cache.raw.cpu(), before.cpu())


def _bad_call(what: str) -> tuple:
    cache = Cache(3, 8, 2, FP8, torch.device("cpu"))
    k_pages, v_pages = cache.pages()
    key = torch.randn(4, 2, D).to(BF16)
    value = torch.randn(4, 2, D).to(BF16)
    slots = torch.arange(4)
    scale = torch.ones(2)
    if what == "v_scale":
        return key, value, k_pages, v_pages, slots, None
    if what == "key":
        return key[:3], value, k_pages, v_pages, slots, scale  # fewer rows than slot_mapping
    if what == "key/value dtype":
        return key.half(), value.half(), k_pages, v_pages, slots, scale
    if what == "slot_mapping dtype":
        return key, value, k_pages, v_pages, slots.float(), scale
    raise AssertionError(what)


@pytest.mark.parametrize("what", ["v_scale", "key", "key/value dtype", "slot_mapping dtype"])
def test_bad_inputs_are_rejected_naming_the_field(what: str) -> None:
    with pytest.raises(UnsupportedLayoutError) as exc:
        write_live_kv(*_bad_call(what))
    assert exc.value.what == what, str(exc.value)


_COMPILE_SCRIPT = textwrap.dedent(
    """
    import sys
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from cartridge_attn import cache_write

    fn = cache_write._write_live_kv_kernel
    v_fp8 = sys.argv[1] == "fp8"
    pointers = {"key_ptr": "*bf16", "value_ptr": "*bf16", "k_cache_ptr": "*bf16",
                "v_cache_ptr": "*fp8e4nv" if v_fp8 else "*bf16", "slot_ptr": "*i64", "v_scale_ptr": "*fp32"}
    signature = {}
    for p in fn.params:
        if p.is_constexpr:
            signature[p.name] = "constexpr"
        elif p.name.endswith("_ptr"):
            signature[p.name] = pointers[p.name]  # a new pointer argument needs a dtype here
        else:
            signature[p.name] = "i32"
    constexprs = {"PAGE": 16, "HEAD_DIM": 128, "V_FP8": v_fp8}
    triton.compile(ASTSource(fn, signature, constexprs=constexprs), target=GPUTarget("cuda", 90, 32))
    print("compiled")
    """
)


@pytest.mark.parametrize("v", ["bf16", "fp8"])
def test_kernel_compiles_for_sm90(v: str) -> None:
    """The interpreter does not apply Triton's compile-time rules; compile for SM90 (no GPU needed)."""
    env = {k: val for k, val in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "kernels"), env.get("PYTHONPATH", "")])
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    proc = subprocess.run(
        [sys.executable, "-c", _COMPILE_SCRIPT, v], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0 and "compiled" in proc.stdout, (proc.stdout + proc.stderr)[-3000:]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA host runs these tests on the compiled kernel")
@pytest.mark.skipif(api.interpreter_usable(), reason="the interpreter tests already run in this process")
def test_in_a_fresh_interpreter_process() -> None:
    # The SM90 compile tests need no interpreter and already ran in this process.
    run_file_in_fresh_process(Path(__file__), 12, "-k", "not compiles_for_sm90")
