"""`cartridge_attn.launch.DirectLaunches`: a specialization launched before goes through the compiled kernel's
launcher with every argument in the kernel's order; anything else through the JIT function. With fake JIT functions
(the compiled launcher exists only on a GPU; on the interpreter every launch takes the ordinary path) and, for the
key, the real serving calls."""

from __future__ import annotations

import random

import pytest
import torch
from _serving_kernels import randint, seeded_generator
from cartridge_attn import CartridgeAttention, LayerOperands, check_live_pages, poison_cascade_states, random_problem
from cartridge_attn import _kernel as K
from cartridge_attn.launch import DirectLaunches, int_specialization, pointer_specialization


class FakeCompiled:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getitem__(self, grid):
        # As Triton's CompiledKernel: the launcher reads all three grid dimensions (the JIT path pads them, this
        # does not).
        grid = (grid[0], grid[1], grid[2])
        return lambda *args: self.calls.append((grid, args))


class FakeJit:
    def __init__(self, returns_compiled: bool = True) -> None:
        self.arg_names = ["x_ptr", "n", "stride", "A", "B"]
        self.calls: list[tuple] = []
        self.returns_compiled = returns_compiled
        self.compiled: list[FakeCompiled] = []

    def __getitem__(self, grid):
        def run(*args, **kwargs):
            self.calls.append((grid, args, kwargs))
            if not self.returns_compiled:
                return None
            self.compiled.append(FakeCompiled())
            return self.compiled[-1]

        return run


def test_a_known_specialization_skips_the_jit_and_passes_every_parameter_in_order() -> None:
    rng = random.Random()
    jit = FakeJit()
    launches = DirectLaunches(jit)
    args = (object(), rng.randrange(2, 100), rng.randrange(1, 64))
    constexprs = {"A": rng.randrange(8), "B": bool(rng.randrange(2))}
    first = launches.launch((3, 2), "k1", args, constexprs, {"num_warps": 4})
    assert jit.calls == [((3, 2), args, {**constexprs, "num_warps": 4})] and launches.direct_launches == 0
    grid = (rng.randrange(1, 9), 2)
    assert launches.launch(grid, "k1", args, constexprs, {"num_warps": 4}) is first
    assert first.calls == [((*grid, 1), (*args, constexprs["A"], constexprs["B"]))]
    assert len(jit.calls) == 1 and launches.direct_launches == 1
    # Another key compiles (or looks up) through the JIT function again.
    launches.launch((1, 2), "k2", args, constexprs, {"num_warps": 4})
    assert len(jit.calls) == 2 and launches.direct_launches == 1


def test_no_compiled_kernel_means_every_launch_goes_through_the_jit() -> None:
    jit = FakeJit(returns_compiled=False)
    launches = DirectLaunches(jit)
    for _ in range(3):
        launches.launch((1,), "k", (object(), 5, 1), {"A": 1, "B": True}, {})
    assert len(jit.calls) == 3 and launches.direct_launches == 0


@pytest.mark.parametrize(
    ("n_args", "constexprs"),
    [(3, {"B": 1, "A": 2}), (2, {"A": 1, "B": 2}), (3, {"A": 1})],
    ids=["constexprs-out-of-order", "argument-missing", "constexpr-missing"],
)
def test_arguments_that_do_not_follow_the_kernel_s_parameters_are_refused(n_args: int, constexprs: dict) -> None:
    launches = DirectLaunches(FakeJit())
    with pytest.raises(ValueError, match="do not follow the kernel's parameters"):
        launches.launch((1,), "k", tuple(range(n_args)), constexprs, {})


def test_specialization_facts_are_triton_s() -> None:
    assert int_specialization(1) == (True, False)
    assert int_specialization(32) == (False, True)
    assert int_specialization(17) == (False, False)
    base = torch.zeros(64, dtype=torch.int32)
    i32 = torch.int32
    assert pointer_specialization((base, base[1:], base[4:])) == ((i32, True), (i32, False), (i32, True))
    assert pointer_specialization((base.view(torch.float32),)) == ((torch.float32, True),)


def test_serving_calls_key_every_specialization_that_can_change(kernel_device, request, monkeypatch) -> None:
    """run_layer and LivePages.write give a new key when the batch turns 1, a pointer loses its 16-byte alignment or
    a stride changes, and the same key for a step that changes none of them; outputs match the JIT path."""
    gen = seeded_generator(request.node.nodeid)
    keys: list = []
    real = DirectLaunches.launch

    def spy(self, grid, key, args, constexprs, options):
        keys.append(key)
        return real(self, grid, key, args, constexprs, options)

    monkeypatch.setattr(DirectLaunches, "launch", spy)
    pr = random_problem([1, 1, 1], [5, 9, 3], device=kernel_device, seed=randint(gen, 0, 2**31 - 1))
    attn = CartridgeAttention()
    attn.plan(*pr.page_table(), **pr.plan_kwargs())
    layer = _two_direct_launches_match_the_jit(attn, pr)
    assert keys[0] == keys[1]
    # The batch is not specialized (the kernel's do_not_specialize): a lone request under the same configuration is
    # the same binary, so it launches directly instead of compiling one for batch 1.
    single = random_problem([1], [7], device=kernel_device, seed=randint(gen, 0, 2**31 - 1))
    one = CartridgeAttention()
    one.plan(*single.page_table(), **single.plan_kwargs(), config=attn.plan_info.config)
    direct_before = layer.launches.direct_launches
    one.run_layer(pr.q[:1], layer, torch.empty_like(pr.q[:1]))
    assert keys[-1] == keys[0]
    if kernel_device.type == "cuda":  # the interpreter returns no compiled kernel to launch directly
        assert layer.launches.direct_launches == direct_before + 1
    wide = torch.zeros(pr.q.shape[0], pr.q.shape[1], pr.q.shape[2] * 2, dtype=pr.q.dtype, device=kernel_device)
    strided = wide[..., : pr.q.shape[2]]
    strided.copy_(pr.q)
    attn.run_layer(strided, layer, torch.empty_like(pr.q))
    assert keys[-1] != keys[0]  # another query stride
    flat = torch.zeros(pr.q.numel() + 1, dtype=pr.q.dtype, device=kernel_device)
    unaligned = flat[1:].view(pr.q.shape)
    unaligned.copy_(pr.q)
    attn.run_layer(unaligned, layer, torch.empty_like(pr.q))
    assert keys[-1] != keys[0]  # a query pointer 2 bytes off 16-byte alignment
    # The cache write: same key for the same layout at another token count, a new one for a misaligned key.
    h_kv, d = pr.live_k.shape[2], pr.live_k.shape[3]
    kv = torch.randn(6, 2, h_kv, d, generator=gen).to(pr.q.dtype).to(kernel_device)
    slots = torch.arange(6, dtype=torch.int64, device=kernel_device)
    pages = check_live_pages(kv[:, 0], kv[:, 1], pr.live_k, pr.live_v, slots, direct_launch=True)
    keys.clear()
    pages.write(kv[:, 0], kv[:, 1], slots)
    pages.write(kv[:4, 0], kv[:4, 1], slots[:4])
    flat_kv = torch.zeros(kv[:, 0].numel() + 1, dtype=kv.dtype, device=kernel_device)
    pages.write(flat_kv[1:].view(kv[:, 0].shape), kv[:, 1], slots)
    pages.write(kv[:, 0], kv[:, 1], slots.to(torch.int32))
    assert keys[0] == keys[1] != keys[2] and keys[3] not in (keys[0], keys[2])  # a slot mapping of another type
    assert (layer.launches.direct_launches == 0) == K.INTERPRETED  # the interpreter compiles nothing to reuse


def test_a_cascade_launches_both_kernels_directly_with_the_jit_s_results(kernel_device, request) -> None:
    """A decode cascade through run_layer: the cascade launch and the live walk each through their own
    DirectLaunches (arguments checked against each kernel's parameters when it compiles), bit-equal to the JIT path
    on every launch; on a GPU the second step skips Triton's binding for both kernels."""
    gen = seeded_generator(request.node.nodeid)
    pr = random_problem([1] * 5, [5, 9, 3, 17, 1], device=kernel_device, seed=randint(gen, 0, 2**31 - 1))
    attn = CartridgeAttention(decode_cascade=True)
    attn.plan(*pr.page_table(), **pr.plan_kwargs())
    assert attn.plan_info.config.cart_rows
    layer = _two_direct_launches_match_the_jit(attn, pr)
    assert layer.launches is not None and layer.cascade_launches is not None
    if kernel_device.type == "cuda":  # the interpreter returns no compiled kernel to launch directly
        assert layer.launches.direct_launches == 1 and layer.cascade_launches.direct_launches == 1
        # The direct launch keeps the live walk a programmatic dependent of the cascade, waiting in the kernel.
        assert attn.plan_info.config.cart_pdl and attn.last_compiled.metadata.launch_pdl
        assert "griddepcontrol.wait" in attn.last_compiled.asm["ptx"]


def _two_direct_launches_match_the_jit(attn: CartridgeAttention, pr) -> LayerOperands:
    """Check `pr`'s layer for direct launches, then run it twice through run_layer into NaN: bit-equal to the JIT
    path's output each time. Returns the layer (its DirectLaunches)."""
    layer = attn.check_layer(pr.cartridge_k, pr.cartridge_v, pr.paged_kv, direct_launch=True, **pr.run_kwargs())
    want = attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, pr.paged_kv, **pr.run_kwargs())
    for _ in range(2):
        got = torch.full_like(want, float("nan"))
        poison_cascade_states(attn)
        attn.run_layer(pr.q, layer, got)
        assert torch.equal(got.view(torch.int16), want.view(torch.int16))
    return layer
