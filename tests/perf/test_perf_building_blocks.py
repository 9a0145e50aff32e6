"""Registry, bytes model, nvidia-smi and ncu parsing: the parts of the perf gate that need no GPU."""

from __future__ import annotations

import random

import pytest
import torch

from qualify.perf import bytes_model as bm
from qualify.perf.gpu_info import parse_clock_csv
from qualify.perf.implementations import (
    KERNEL_SET,
    Implementation,
    ImplementationRegistry,
    ImplementationSet,
    default_implementations,
    load_ref,
)
from qualify.perf.kernel_set import cell_bytes, cell_spec
from qualify.perf.metrics import metric
from qualify.perf.ncu import CORE_FIELDS, COUNTERS, available_bases, parse_csv, plan_metrics, range_name
from qualify.perf.spec import ShapeSet

SHAPE = bm.AttentionShape(num_qo_heads=32, num_kv_heads=8, head_dim=128, cartridge_len=632)


def test_registry_lists_choices_on_a_miss_and_refuses_collisions() -> None:
    reg = default_implementations()
    assert reg.get_set("kernel").names() == [
        "fused-k16v8", "fused-k16v16", "fused-k16v8-triton", "fused-k16v8-gluon", "fused-k16v16-gluon",
        "fused-k16v8-cascade",
        "flashinfer-inject-bf16", "flashinfer-inject-fp8", "flashinfer-shared-pages-bf16", "fa3-shared-pages-bf16",
        "flashinfer-cascade-bf16",
    ]  # fmt: skip
    assert [s.name for s in reg] == ["engine", "kernel", "serving"]
    with pytest.raises(KeyError, match="choices: engine, kernel, serving"):
        reg.get_set("streams")
    with pytest.raises(KeyError, match="choices: fused-k16v8, fused-k16v16"):
        reg.get_set("kernel").get("fused")
    with pytest.raises(ValueError, match="registered twice"):
        reg.register(KERNEL_SET)
    one = Implementation("a", "", frozenset({"ttft_proxy_ms"}))
    with pytest.raises(ValueError, match="names \\['a'\\] twice"):
        ImplementationRegistry().register(ImplementationSet("s", "", "m:f", (one, one)))
    with pytest.raises(ValueError, match="reserved"):
        ImplementationRegistry().register(
            ImplementationSet("s", "", "m:f", (Implementation("release", "", frozenset()),))
        )
    with pytest.raises(ValueError, match="unknown metrics"):
        ImplementationRegistry().register(
            ImplementationSet("s", "", "m:f", (Implementation("a", "", frozenset({"x"})),))
        )


def _bytes(name: str) -> bm.Layout:
    layout = KERNEL_SET.get(name).bytes
    assert layout is not None
    return layout


def test_every_kernel_implementation_names_a_builder_that_exists_and_a_bytes_layout() -> None:
    for impl in KERNEL_SET.implementations:
        assert impl.bytes is not None, impl.name
        assert impl.builder is not None and callable(load_ref(impl.builder)), impl.name


def test_shared_cartridge_is_counted_once_and_injected_once_per_request() -> None:
    shared = _bytes("fused-k16v16")
    injected = _bytes("flashinfer-inject-bf16")
    cart = 632 * 8 * 128 * 4
    one = bm.attention_bytes(shared, SHAPE, 1, 1, 144)
    assert bm.attention_bytes(injected, SHAPE, 1, 1, 144) == one
    assert bm.attention_bytes(injected, SHAPE, 64, 1, 144) - bm.attention_bytes(shared, SHAPE, 64, 1, 144) == 63 * cart
    # FP8 V saves a quarter of the shared cartridge's bytes.
    v8 = bm.attention_bytes(_bytes("fused-k16v8"), SHAPE, 16, 1, 144)
    assert bm.attention_bytes(shared, SHAPE, 16, 1, 144) - v8 == cart // 4
    assert bm.decode_step_bytes(shared, SHAPE, 36, 16, 144) == 36 * bm.attention_bytes(shared, SHAPE, 16, 1, 144)


def test_ttft_counts_the_cartridge_copy_only_for_injection() -> None:
    assert bm.cartridge_copy_bytes(_bytes("fused-k16v8"), SHAPE, 64) == 0
    assert bm.cartridge_copy_bytes(_bytes("flashinfer-cascade-bf16"), SHAPE, 64) == 0
    assert bm.cartridge_copy_bytes(_bytes("flashinfer-inject-bf16"), SHAPE, 64) == 65 * 632 * 8 * 128 * 4
    assert bm.pct_of_peak(4_000, 1.0, 8_000.0) == 50.0
    assert bm.pct_of_peak(4_000, 1.0, None) is None


def test_clock_csv_parsing() -> None:
    rows = parse_clock_csv("0, NVIDIA H200, 00000000:19:00.0, 1980, 3201, 1980\nbad line\n")
    assert rows == [
        {"index": "0", "name": "NVIDIA H200", "pci.bus_id": "00000000:19:00.0", "clocks.sm": 1980,
         "clocks.mem": 3201, "clocks.max.sm": 1980}
    ]  # fmt: skip


NCU_CSV = """==PROF== Connected to process 1234
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Metric Name","Metric Unit","Metric Value"
"0","1234","python3","h","perf:decode_tokens_per_s:b16:s128","1","7","dram__bytes.sum","byte","1,048,576"
"0","1234","python3","h","perf:decode_tokens_per_s:b16:s128","1","7","lts__t_sector_hit_rate.pct","%","40.5"
"0","1234","python3","h","perf:decode_tokens_per_s:b16:s128","1","7","sm__warps_active.avg.pct_of_peak_sustained_active","%","6.25"
"1","1234","python3","h","perf:decode_tokens_per_s:b16:s128","1","7","dram__bytes.sum","byte","1000"
"1","1234","python3","h","perf:decode_tokens_per_s:b16:s128","1","7","lts__t_sector_hit_rate.pct","%","60.5"
"2","1234","python3","h","some_other_kernel","1","7","dram__bytes.sum","byte","5"
==PROF== Disconnected
"""


def test_ncu_csv_is_attributed_to_cells_by_range_name() -> None:
    name = range_name("decode_tokens_per_s", 16, 128)
    out = parse_csv(NCU_CSV, [name, range_name("ttft_proxy_ms", 16, 128)])
    cell = out[name]
    assert cell["kernels"] == 2
    assert cell["dram_bytes"] == 1_048_576 + 1000
    assert cell["l2_hit_rate_pct"] == pytest.approx(50.5)
    assert cell["achieved_occupancy_pct"] == pytest.approx(6.25)
    assert out["unattributed"]["dram_bytes"] == 5
    assert range_name("ttft_proxy_ms", 16, 128) not in out


def test_rates_are_weighted_by_kernel_time_when_every_kernel_has_one(test_seed: int) -> None:
    # FA3's cells hold a short scheduling kernel beside the attention kernel: a plain mean would give its
    # occupancy as much say as the kernel that takes the time.
    rng = random.Random(test_seed)
    name = range_name("ttft_proxy_ms", 16, 512)
    plan = plan_metrics({"gpu__time_duration", "sm__warps_active", "dram__bytes"})
    head = '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
    occ = [rng.uniform(5, 60) for _ in range(2)]
    ns = [rng.uniform(1e5, 1e6), rng.uniform(1e3, 1e4)]
    rows = [head]
    for i in range(2):
        rows.append(f'"{i}","{name}","gpu__time_duration.sum","ns","{ns[i]}"')
        rows.append(f'"{i}","{name}","sm__warps_active.avg.pct_of_peak_sustained_active","%","{occ[i]}"')
    cell = parse_csv("\n".join(rows), [name], plan)[name]
    assert cell["duration_ns"] == pytest.approx(sum(ns))
    assert cell["achieved_occupancy_pct"] == pytest.approx((occ[0] * ns[0] + occ[1] * ns[1]) / sum(ns))
    # One kernel without a duration: the plain mean, not a weight made up for it.
    cell = parse_csv("\n".join(rows[:3] + rows[4:]), [name], plan)[name]
    assert cell["achieved_occupancy_pct"] == pytest.approx(sum(occ) / 2)


# `ncu --query-metrics` lists base names in a table (or CSV with --csv); the profile asks for what it offers.
NCU_QUERY = """Device gh100 (GH100)
------------------------------------------------------- ------------------------------------------------------
Metric Name                                             Metric Description
dram__bytes                                             # of bytes accessed in DRAM
"lts__t_bytes","# of bytes requested"
sm__inst_executed_pipe_tensor_op_hmma                   # of warp instructions executed by the tensor pipe
smsp__warp_issue_stalled_barrier_per_warp_active        proportion of warps per cycle waiting at a barrier
smsp__warp_issue_stalled_long_scoreboard_per_warp_active  proportion of warps waiting for an L1TEX dependency
smsp__warp_issue_stalled_wait_per_warp_active           proportion of warps waiting on a fixed latency
"""


def test_the_profile_asks_for_the_first_name_of_each_counter_this_ncu_offers() -> None:
    bases = available_bases(NCU_QUERY)
    assert {"dram__bytes", "lts__t_bytes", "smsp__warp_issue_stalled_wait_per_warp_active"} <= bases
    assert not {"Metric", "Device", "proportion"} & bases
    plan = plan_metrics(bases)
    fields = {c.field: m for m, c in plan.by_metric.items()}
    assert fields["dram_bytes"] == "dram__bytes.sum" and fields["l2_bytes"] == "lts__t_bytes.sum"
    assert fields["tensor_instructions"] == "sm__inst_executed_pipe_tensor_op_hmma.sum"
    assert "wgmma_instructions" in plan.missing  # this ncu offers no gmma counter: said, not filled with another
    assert fields["registers_per_thread"] == "launch__registers_per_thread"  # launch statistics always come
    assert "l2_hit_rate_pct" in plan.missing and "stall_short_scoreboard_pct" in plan.missing
    assert set(plan.missing) | set(fields) == {c.field for c in COUNTERS}
    # No query result: only the counters every ncu has, the rest said to be missing.
    core = plan_metrics(None)
    launch = {c.field for c in COUNTERS if c.candidates[0].startswith("launch__")}
    assert {c.field for c in core.by_metric.values()} == set(CORE_FIELDS) | launch
    assert len(core.missing) == len(COUNTERS) - len(CORE_FIELDS) - len(launch)


def test_counters_aggregate_as_their_kind_says_and_name_the_top_stalls(test_seed: int) -> None:
    rng = random.Random(test_seed)
    plan = plan_metrics(available_bases(NCU_QUERY))
    name = range_name("ttft_proxy_ms", 64, 512)
    head = '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
    rows, want = [head], {"dram": 0.0, "regs": 0.0, "barrier": [], "wait": [], "long": []}
    for kid in range(rng.randint(2, 4)):
        dram, regs = rng.randint(1, 10**9), rng.randint(32, 255)
        # Disjoint ranges, so that the ranking asserted below holds for every draw (barrier's used to reach below
        # long scoreboard's: QUALIFY_TEST_SEED=2512925668 failed).
        stalls = {"barrier": rng.uniform(6, 30), "wait": rng.uniform(31, 60), "long": rng.uniform(0, 5)}
        want["dram"] += dram
        want["regs"] = max(want["regs"], regs)
        metrics = {"dram__bytes.sum": dram, "launch__registers_per_thread": regs,
                   "smsp__warp_issue_stalled_barrier_per_warp_active.pct": stalls["barrier"],
                   "smsp__warp_issue_stalled_wait_per_warp_active.pct": stalls["wait"],
                   "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct": stalls["long"],
                   "not_asked_for.sum": 7}  # fmt: skip
        for k, v in stalls.items():
            want[k].append(v)
        rows += [f'"{kid}","{name}","{m}","","{v:,}"' for m, v in metrics.items()]
    cell = parse_csv("\n".join(rows), [name], plan)[name]
    assert cell["dram_bytes"] == want["dram"] and cell["registers_per_thread"] == want["regs"]
    assert cell["stall_barrier_pct"] == pytest.approx(sum(want["barrier"]) / len(want["barrier"]))
    assert cell["top_stalls"] == ["wait", "barrier", "long_scoreboard"]
    # An issuing warp is no stall: a large "selected" share is recorded and never ranked.
    selected = "smsp__warp_issue_stalled_selected_per_warp_active.pct"
    extra = [f'"9","{name}","{selected}","","99"']
    plan_all = plan_metrics(available_bases(NCU_QUERY + "smsp__warp_issue_stalled_selected_per_warp_active x\n"))
    cell = parse_csv("\n".join(rows + extra), [name], plan_all)[name]
    assert cell["stall_selected_pct"] == 99 and "selected" not in cell["top_stalls"]
    assert "not_asked_for" not in str(cell)


def test_a_prefill_that_reads_the_cartridges_fp16_expansion_is_counted_at_2_bytes_a_value() -> None:
    # The Gluon prefill reads an FP8 cartridge's FP16 expansion: its bytes are those of a BF16 cartridge V, while
    # what it holds (the table's layout) stays K16/V8.
    shape = ShapeSet(
        id="t", num_layers=2, num_qo_heads=32, num_kv_heads=8, head_dim=128, page_size=8, cartridge_len=632,
        batches=[4], suffixes=[128], generated_tokens=8,
    )  # fmt: skip
    spec = cell_spec(shape, metric("ttft_proxy_ms"), 4, 128, l2_cold=True, redundant=1, device=torch.device("cpu"),
                     seed=1)  # fmt: skip
    held = cell_bytes("fused-k16v8-gluon", spec)
    read = cell_bytes("fused-k16v8-gluon", spec, cartridge_v_read_bytes=2)
    assert read == cell_bytes("fused-k16v16-gluon", spec)
    # The one shared cartridge V, read once per layer: 1 byte more a value.
    assert read - held == shape.num_layers * 632 * 8 * 128
