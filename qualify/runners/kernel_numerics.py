"""Run one `kernel_numerics` item.

Measurements (also what `qualify render` draws as the numerics grid):
    {"check", "phase", "live_v", "cartridge_v", "page_size", "cartridge_len", "sink", "head_dim", "batch",
     "q_lens", "live_lens", "kv_layout", "contract": bool, "expected_error", "raised",
     "max_abs_err", "max_rel_err", "rel_l2", "nan_count", "violations",
     "tolerance": {"rtol", "atol", "rel_l2"}, "second_oracle": {...} | None, "seeds": [...], "kernel": {...}}

max_rel_err is max |out - ref| / max(|ref|, atol), so elements near zero do not dominate it; the decision
uses the elementwise bound |out - ref| <= atol + rtol * |ref| (as torch.testing.assert_close) and the
relative L2 error.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from unittest import mock

import torch

from qualify.compile import GateItem
from qualify.errors import QualifyError
from qualify.kinds.kernel_numerics import KernelNumericsParams
from qualify.results import Check, InputRef, ItemOutcome
from qualify.runners.context import RunContext

_DTYPES = {"bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn}
_EXPECTED_ERROR = "UnsupportedLayoutError"


def _seed(ctx: RunContext, item: GateItem, repeat: int) -> int:
    digest = hashlib.sha256(f"{ctx.seed}:{item.gate_file.suite}:{item.name}:{repeat}".encode()).digest()
    return int.from_bytes(digest[:7], "little")


def _device(p: KernelNumericsParams) -> torch.device:
    import cartridge_attn._kernel as K

    if p.device == "cpu" or (p.device == "auto" and not torch.cuda.is_available()):
        if not K.INTERPRETED:
            raise QualifyError(
                "the fused kernel needs a CUDA GPU; on a CPU host it runs only under TRITON_INTERPRET=1 (tests)"
            )
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def contract_violation(p: KernelNumericsParams) -> str | None:
    """Why the kernel's documented contract excludes this cell, or None when it must serve it."""
    import cartridge_attn as ca

    if p.cartridge.length <= 0 or p.cartridge.length % p.page_size:
        return f"cartridge length {p.cartridge.length} is not a positive multiple of page size {p.page_size}"
    if p.page_size not in ca.SUPPORTED_PAGE_SIZES:
        return f"page size {p.page_size} not in {ca.SUPPORTED_PAGE_SIZES}"
    if p.head_dim not in ca.SUPPORTED_HEAD_DIMS:
        return f"head_dim {p.head_dim} not in {ca.SUPPORTED_HEAD_DIMS}"
    if (
        p.num_kv_heads <= 0
        or p.num_qo_heads % p.num_kv_heads
        or p.num_qo_heads // p.num_kv_heads not in (ca.SUPPORTED_GROUPS)
    ):
        return f"GQA group {p.num_qo_heads}/{p.num_kv_heads} not supported"
    if any(n == 0 for n in p.batch.live_lens):
        return "a request has zero live tokens"
    return None


def _problem(p: KernelNumericsParams, device: torch.device, seed: int, live_lens: list[int] | None = None) -> Any:
    from cartridge_attn import random_problem

    live = live_lens or p.batch.live_lens
    q_lens = [1] * len(live) if p.phase == "decode" else list(p.batch.q_lens or [1] * len(live))
    pr = random_problem(
        q_lens,
        live,
        num_qo_heads=p.num_qo_heads,
        num_kv_heads=p.num_kv_heads,
        head_dim=p.head_dim,
        page_size=p.page_size,
        cartridge_len=p.cartridge.length,
        dtype=torch.bfloat16,
        cartridge_v_dtype=_DTYPES[p.cartridge_v],
        live_v_dtype=_DTYPES[p.live_v],
        fp8_scale=p.fp8_scale,
        combined=p.kv_layout == "combined",
        device=device,
        seed=seed,
    )
    if p.emphasize_boundary and p.cartridge.length and all(n > 0 for n in live):
        _emphasize(pr, p, seed)
    return pr


def _boost(pr: Any, seed: int, targets: list[tuple[str, int]], logit: float) -> None:
    """Raise the logit of chosen key positions by about `logit` for every query of their KV head.

    Queries of KV head h get a shared unit direction u_h (scaled by sqrt(D), which adds only O(1) noise
    to other logits) and each target key is replaced by logit * u_h, so those keys carry a known share of
    the attention however random the rest is. Targets are ("cartridge", position) or ("live", position
    within every request).
    """
    gen = torch.Generator(device=pr.q.device)
    gen.manual_seed(seed + 7)
    h_q, d = pr.q.shape[1], pr.q.shape[2]
    h_kv = pr.cartridge_k.shape[1]
    u = torch.randn(h_kv, d, generator=gen, device=pr.q.device)
    u = u / u.norm(dim=-1, keepdim=True)
    pr.q.add_((u * math.sqrt(d)).repeat_interleave(h_q // h_kv, dim=0).to(pr.q.dtype))
    key = (logit * u).to(pr.cartridge_k.dtype)
    ps = pr.page_size
    for source, pos in targets:
        if source == "cartridge":
            pr.cartridge_k[pos] = key
            continue
        indptr = pr.kv_indptr.tolist()
        for b in range(len(indptr) - 1):
            page = int(pr.kv_indices[indptr[b] + pos // ps])
            pr.live_k[page, pos % ps] = key


def _emphasize(pr: Any, p: KernelNumericsParams, seed: int) -> None:
    """Make the inputs able to expose boundary mistakes, not only average ones.

    With random keys a dropped or misplaced single position moves the output by ~1/n and hides inside
    the tolerance. So the positions a kernel is most likely to get wrong carry real weight: the last
    cartridge position and the first live position (the boundary between the two sources), and, for a
    `sink` cartridge, position 0 as a trained attention sink does.
    """
    n_keys = p.cartridge.length + sum(p.batch.live_lens) / len(p.batch.live_lens)
    base = math.log(max(n_keys, 2.0))
    targets = [("cartridge", p.cartridge.length - 1), ("live", 0)]
    _boost(pr, seed, targets, base)
    if p.cartridge.sink:
        _boost(pr, seed + 1, [("cartridge", 0)], base + 1.0)


@dataclass
class _Errors:
    max_abs: float
    max_rel: float
    rel_l2: float
    nan_count: int
    violations: int

    @staticmethod
    def between(out: torch.Tensor, ref: torch.Tensor, rtol: float, atol: float) -> _Errors:
        out32, ref32 = out.float(), ref.float()
        nan_count = int(torch.isnan(out32).sum())
        diff = (out32 - ref32).abs().nan_to_num(nan=float("inf"))
        bound = atol + rtol * ref32.abs()
        return _Errors(
            max_abs=float(diff.max()),
            max_rel=float((diff / ref32.abs().clamp_min(atol)).max()),
            rel_l2=float(diff.norm() / ref32.norm().clamp_min(1e-30)),
            nan_count=nan_count,
            violations=int((diff > bound).sum()),
        )

    def worst(self, other: _Errors) -> _Errors:
        return _Errors(
            max(self.max_abs, other.max_abs),
            max(self.max_rel, other.max_rel),
            max(self.rel_l2, other.rel_l2),
            self.nan_count + other.nan_count,
            self.violations + other.violations,
        )


def _fused(pr: Any, p: KernelNumericsParams, fault: int) -> tuple[torch.Tensor, Any]:
    from cartridge_attn import CartridgeAttention

    attn = CartridgeAttention()
    attn.plan(*pr.page_table(), device=pr.q.device, _fault=fault, **pr.plan_kwargs())
    # Poisoned: an element the kernel fails to write stays NaN and fails the cell.
    out = torch.full_like(pr.q, float("nan"))
    attn.run(pr.q, pr.cartridge_k, pr.cartridge_v, pr.paged_kv, out=out, **pr.run_kwargs())
    if pr.q.is_cuda:
        torch.cuda.synchronize()
    return out, attn


def _reference(pr: Any) -> torch.Tensor:
    from cartridge_attn import reference_attention

    return reference_attention(
        pr.q, pr.cartridge_k, pr.cartridge_v, pr.live_k, pr.live_v, *pr.page_table(), **pr.run_kwargs()
    )


def _want_second_oracle(p: KernelNumericsParams, device: torch.device) -> bool:
    if p.second_oracle == "none" or device.type != "cuda":
        return False
    import importlib.util

    have = importlib.util.find_spec("flashinfer") is not None
    if p.second_oracle == "flashinfer" and not have:
        raise QualifyError("second_oracle: flashinfer was required but FlashInfer is not installed")
    return have


def _tolerance_checks(prefix: str, e: _Errors, p: KernelNumericsParams, n: int) -> list[Check]:
    return [
        Check(
            name=f"{prefix}NaN outputs (poisoned buffer)",
            observed=float(e.nan_count),
            operator="<=",
            threshold=0.0,
            statistic="elements still NaN after the launch; the output was filled with NaN before it",
            n=n,
        ),
        Check(
            name=f"{prefix}elements outside atol + rtol*|ref|",
            observed=float(e.violations),
            operator="<=",
            threshold=0.0,
            statistic=f"count over all outputs, rtol={p.rtol}, atol={p.atol} (max abs err {e.max_abs:.3e})",
            n=n,
        ),
        Check(
            name=f"{prefix}relative L2 error",
            observed=e.rel_l2,
            operator="<=",
            threshold=p.max_rel_l2,
            statistic="||out - ref||_2 / ||ref||_2, worst over repeats",
            n=n,
        ),
    ]


def _base_measurements(p: KernelNumericsParams) -> dict[str, Any]:
    q_lens = [1] * len(p.batch.live_lens) if p.phase == "decode" else p.batch.q_lens
    return {
        "check": p.check,
        "phase": p.phase,
        "live_v": p.live_v,
        "cartridge_v": p.cartridge_v,
        "page_size": p.page_size,
        "cartridge_len": p.cartridge.length,
        "sink": p.cartridge.sink,
        "head_dim": p.head_dim,
        "batch": p.batch.id,
        "q_lens": q_lens,
        "live_lens": p.batch.live_lens,
        "kv_layout": p.kv_layout,
        "tolerance": {"rtol": p.rtol, "atol": p.atol, "rel_l2": p.max_rel_l2},
    }


def _kernel_inputs() -> list[InputRef]:
    import cartridge_attn._kernel as K
    from cartridge_attn import source_sha256

    return [InputRef("cartridge_attn/_kernel.py", K.__file__, source_sha256(), "kernel-source")]


def _rejection_check(label: str, raised: BaseException | None) -> Check:
    ok = type(raised).__name__ == _EXPECTED_ERROR
    return Check(
        name=f"rejects {label}",
        observed=1.0 if ok else 0.0,
        operator=">=",
        threshold=1.0,
        statistic=(
            f"1 when {_EXPECTED_ERROR} is raised; got "
            + ("no error: the layout was SERVED" if raised is None else f"{type(raised).__name__}: {raised}")
        ),
        n=1,
    )


def _expect_rejection(call: Any) -> BaseException | None:
    try:
        call()
    except Exception as exc:  # any error is recorded; only the documented one passes
        return exc
    return None


def _run_kernel(item: GateItem, p: KernelNumericsParams, ctx: RunContext) -> ItemOutcome:
    device = _device(p)
    fault = int(ctx.options.get("kernel_fault", 0))
    m = _base_measurements(p)
    violation = contract_violation(p)
    outcome = ItemOutcome(measurements=m, inputs=_kernel_inputs(), parameters=p.model_dump(mode="json"))
    if fault:
        outcome.notes.append(f"TEST-ONLY: the kernel ran as deliberately wrong variant {fault}")
        outcome.parameters["kernel_fault"] = fault
    if violation:
        # Outside the contract: the kernel must refuse, whatever the matrix asked for.
        seed = _seed(ctx, item, 0)
        raised = _expect_rejection(lambda: _fused(_problem(p, device, seed), p, fault))
        m.update(contract=True, expected_error=_EXPECTED_ERROR, raised=repr(raised), violation=violation)
        outcome.checks.append(_rejection_check(violation, raised))
        outcome.measurements["seeds"] = [seed]
        return outcome

    import cartridge_attn as ca

    errors: _Errors | None = None
    oracle_errors: _Errors | None = None
    seeds = []
    attn = None
    n_elems = 0
    second = _want_second_oracle(p, device)
    for r in range(p.repeats):
        seed = _seed(ctx, item, r)
        seeds.append(seed)
        pr = _problem(p, device, seed)
        out, attn = _fused(pr, p, fault)
        ref = _reference(pr)
        e = _Errors.between(out, ref, p.rtol, p.atol)
        errors = e if errors is None else errors.worst(e)
        n_elems += out.numel()
        if second:
            from cartridge_attn.baselines import flashinfer_injection_attention

            fi_out = flashinfer_injection_attention(pr, causal=True)
            oe = _Errors.between(out, fi_out, p.rtol, p.atol)
            oracle_errors = oe if oracle_errors is None else oracle_errors.worst(oe)
    assert errors is not None
    m.update(
        contract=False,
        max_abs_err=errors.max_abs,
        max_rel_err=errors.max_rel,
        rel_l2=errors.rel_l2,
        nan_count=errors.nan_count,
        violations=errors.violations,
        seeds=seeds,
        kernel=ca.kernel_identity(attn),
        second_oracle=None
        if oracle_errors is None
        else {
            "name": "flashinfer-injection-bf16",
            "max_abs_err": oracle_errors.max_abs,
            "rel_l2": oracle_errors.rel_l2,
        },
    )
    outcome.checks.extend(_tolerance_checks("", errors, p, n_elems))
    if oracle_errors is not None:
        outcome.checks.extend(_tolerance_checks("vs FlashInfer injection: ", oracle_errors, p, n_elems)[1:])
    elif device.type == "cuda":
        outcome.notes.append(
            "second oracle (FlashInfer) not run: " + ("disabled" if p.second_oracle == "none" else "not installed")
        )
    return outcome


@contextmanager
def _pretend_capability(cap: tuple[int, int]) -> Iterator[None]:
    with mock.patch("torch.cuda.get_device_capability", return_value=cap):
        yield


# Each case breaks exactly one thing in an otherwise valid cell, and the error must name that thing, so a
# rejection for some other reason cannot pass the cell.
_CASE_FIELD = {
    "misaligned_cartridge": "cartridge_len",
    "zero_live": "live tokens",
    "unsupported_head_dim": "head_dim",
    "fp8_keys": "K dtype",
}


def _case_cell(p: KernelNumericsParams) -> KernelNumericsParams:
    if p.case == "misaligned_cartridge":
        length = p.cartridge.length if p.cartridge.length % p.page_size else p.cartridge.length + 1
        return p.model_copy(update={"cartridge": p.cartridge.model_copy(update={"length": length})})
    if p.case == "zero_live":
        return p.model_copy(update={"batch": p.batch.model_copy(update={"live_lens": [*p.batch.live_lens[:-1], 0]})})
    if p.case == "unsupported_head_dim":
        return p.model_copy(update={"head_dim": 96})
    return p


def _rejection_for(case: str, raised: BaseException | None) -> Check:
    field = _CASE_FIELD[case]
    ok = type(raised).__name__ == _EXPECTED_ERROR and field in str(raised)
    got = "no error: the layout was SERVED" if raised is None else f"{type(raised).__name__}: {raised}"
    return Check(
        name=f"rejects {case.replace('_', ' ')}",
        observed=1.0 if ok else 0.0,
        operator=">=",
        threshold=1.0,
        statistic=f"1 when {_EXPECTED_ERROR} naming {field!r} is raised; got {got}",
        n=1,
    )


def _run_contract(item: GateItem, p: KernelNumericsParams, ctx: RunContext) -> ItemOutcome:
    from cartridge_attn import CartridgeAttention

    if contract_violation(p):
        raise QualifyError(f"{item.name}: a contract cell starts from a valid cell ({contract_violation(p)})")
    # Host tensors suffice for layout cases: every layout check happens in plan() before the device is used.
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    seed = _seed(ctx, item, 0)
    cell = _case_cell(p)
    m = _base_measurements(cell)
    m.update(contract=True, expected_error=_EXPECTED_ERROR, case=p.case, seeds=[seed])
    outcome = ItemOutcome(measurements=m, inputs=_kernel_inputs(), parameters=p.model_dump(mode="json"))
    case = p.case
    if case in ("misaligned_cartridge", "unsupported_head_dim", "zero_live"):
        raised = _expect_rejection(lambda: _fused(_problem(cell, device, seed), cell, 0))
        outcome.checks.append(_rejection_for(case, raised))
    elif case == "fp8_keys":
        pr = _problem(cell, device, seed)
        kw = pr.plan_kwargs()
        attn = CartridgeAttention()
        for where, dtype_kw in (("cartridge", "cartridge_k_dtype"), ("live", "live_k_dtype")):
            raised = _expect_rejection(
                lambda k=dtype_kw: attn.plan(*pr.page_table(), device=device, **{k: torch.float8_e4m3fn}, **kw)
            )
            check = _rejection_for(case, raised)
            outcome.checks.append(Check(**{**check.__dict__, "name": f"rejects FP8 {where} keys at plan()"}))
        if device.type == "cuda":
            attn.plan(*pr.page_table(), device=device, **kw)
            fp8_k = pr.cartridge_k.to(torch.float8_e4m3fn)
            raised = _expect_rejection(lambda: attn.run(pr.q, fp8_k, pr.cartridge_v, pr.paged_kv, **pr.run_kwargs()))
            ok = type(raised).__name__ == _EXPECTED_ERROR
            outcome.checks.append(
                Check(
                    name="rejects FP8 cartridge keys at run()",
                    observed=1.0 if ok else 0.0,
                    operator=">=",
                    threshold=1.0,
                    statistic=f"1 when {_EXPECTED_ERROR} is raised; got "
                    + ("no error: SERVED" if raised is None else f"{type(raised).__name__}: {raised}"),
                    n=1,
                )
            )
    elif case == "non_sm90":
        if device.type != "cuda":
            raise QualifyError("the non_sm90 contract cell needs a CUDA device (declare requires: [cuda])")
        pr = _problem(cell, device, seed)

        def plan() -> object:
            return CartridgeAttention().plan(*pr.page_table(), device=device, **pr.plan_kwargs())

        if torch.cuda.get_device_capability(device) == (9, 0):
            # The only GPU here is SM90: the guard is exercised by presenting an SM89 capability to it.
            outcome.notes.append("host GPU is SM90; the architecture guard was shown an SM89 (Ada) capability")
            with _pretend_capability((8, 9)):
                raised = _expect_rejection(plan)
        else:
            raised = _expect_rejection(plan)
        ok = type(raised).__name__ == "UnsupportedArchitectureError"
        outcome.checks.append(
            Check(
                name="rejects a non-SM90 GPU",
                observed=1.0 if ok else 0.0,
                operator=">=",
                threshold=1.0,
                statistic="1 when UnsupportedArchitectureError is raised; got "
                + ("no error: SERVED" if raised is None else f"{type(raised).__name__}: {raised}"),
                n=1,
            )
        )
        m["expected_error"] = "UnsupportedArchitectureError"
    m["raised"] = [c.statistic for c in outcome.checks]
    return outcome


def _independent_attention(pr: Any, inj: Any) -> torch.Tensor:
    """float64 attention over the injection layout, written without the reference's helpers."""
    cache = inj.kv_cache.double()
    ps = cache.shape[2]
    h_q = pr.q.shape[1]
    h_kv = cache.shape[3]
    d = pr.q.shape[2]
    out = torch.empty(pr.q.shape, dtype=torch.float64)
    qo = pr.qo_indptr.tolist()
    indptr = inj.kv_indptr.tolist()
    for b in range(len(qo) - 1):
        pages = inj.kv_indices[indptr[b] : indptr[b + 1]].long()
        n_tok = (len(pages) - 1) * ps + int(inj.kv_last_page_len[b])
        k = cache[pages, 0].reshape(-1, h_kv, d)[:n_tok]
        v = cache[pages, 1].reshape(-1, h_kv, d)[:n_tok]
        q = pr.q[qo[b] : qo[b + 1]].double()
        n_q = q.shape[0]
        for t in range(n_q):
            visible = n_tok - n_q + t + 1  # bottom-right causal over the whole sequence; cartridge always visible
            for h in range(h_q):
                kh = k[:visible, h // (h_q // h_kv)]
                s = (kh @ q[t, h]) / math.sqrt(d)
                w = torch.softmax(s, dim=0)
                out[qo[b] + t, h] = w @ v[:visible, h // (h_q // h_kv)]
    return out


def _run_reference(item: GateItem, p: KernelNumericsParams, ctx: RunContext) -> ItemOutcome:
    from cartridge_attn import build_injection_layout

    m = _base_measurements(p)
    outcome = ItemOutcome(measurements=m, inputs=_kernel_inputs(), parameters=p.model_dump(mode="json"))
    violation = contract_violation(p)
    if violation:
        raise QualifyError(f"{item.name}: a reference cell must be inside the kernel contract ({violation})")
    worst = 0.0
    seeds = []
    n = 0
    for r in range(p.repeats):
        seed = _seed(ctx, item, r)
        seeds.append(seed)
        pr = _problem(p, torch.device("cpu"), seed)
        ref = _reference(pr)
        inj = build_injection_layout(
            pr.cartridge_k, pr.cartridge_v, pr.live_k, pr.live_v, pr.kv_indptr, pr.kv_indices,
            pr.kv_last_page_len, cartridge_v_scale=pr.cartridge_v_scale, live_v_scale=pr.live_v_scale,
            dtype=torch.float64,
        )  # fmt: skip
        oracle = _independent_attention(pr, inj)
        worst = max(worst, float((ref.double() - oracle).abs().max()))
        n += ref.numel()
    m.update(contract=False, max_abs_err=worst, seeds=seeds)
    outcome.checks.append(
        Check(
            name="fp32 reference vs float64 over the injection layout",
            observed=worst,
            operator="<=",
            threshold=1e-4,
            statistic="max |reference - independent float64 attention over cartridge pages + live pages|",
            n=n,
        )
    )
    return outcome


def run(item: GateItem, ctx: RunContext) -> ItemOutcome:
    p = item.params
    assert isinstance(p, KernelNumericsParams)
    if p.check == "reference":
        return _run_reference(item, p, ctx)
    if p.check == "contract":
        return _run_contract(item, p, ctx)
    return _run_kernel(item, p, ctx)
