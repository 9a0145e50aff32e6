"""A numerics gate's `envelope:` compiles into cells that reach every region of the kernel's dispatch at its
edges: the configurations production launches are the ones the gate qualifies."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from cartridge_attn import decode_config, prefill_config
from cartridge_attn.dispatch import Envelope, dispatch_table, prefill_regions

from qualify.cli import main
from qualify.compile import compile_gate_file
from qualify.errors import GateFileError
from qualify.registry import default_registry

GATES = Path(__file__).parents[2] / "gates" / "kernel_numerics.yaml"


def _items(gate_id: str) -> list:
    compiled = compile_gate_file(GATES, default_registry())
    return [i for i in compiled.items if i.gate_id == gate_id]


def _decode_config_of(item):
    lives, p = item.params.batch.live_lens, item.params
    return decode_config(32 // 8, p.head_dim, len(lives), max(lives), num_kv_heads=8, cartridge_len=p.cartridge.length)


def test_the_decode_envelope_reaches_every_decode_region_at_its_edges() -> None:
    items = [i for i in _items("numerics-envelope-decode") if i.params.live_v == "bf16"]
    batches = {len(i.params.batch.live_lens) for i in items}
    assert {1, 4, 5, 31, 32, 33, 256} <= batches  # where packing starts, one either side, the maximum
    regions = [
        r for r in dispatch_table(Envelope(groups=(4,), head_dims=(128,), max_batch=256, max_live=4096))
        if r.mode == "decode"
    ]  # fmt: skip
    reached = {id(r) for r in regions for i in items
               if r.contains(batch=len(i.params.batch.live_lens), max_live=max(i.params.batch.live_lens),
                             num_kv_heads=8, cartridge_len=632)}  # fmt: skip
    assert reached == {id(r) for r in regions}
    configs = {(c.reqs_per_program, c.splits) for c in map(_decode_config_of, items)}
    assert configs == {(1, 1), (2, 1), (1, 2), (1, 4), (1, 8), (1, 16)}  # plain, packed, and split 2 to 16 ways


def test_envelope_batches_are_ragged_and_seeded() -> None:
    items = {i.cell_id: i.params for i in _items("numerics-envelope-decode")}
    b33 = items["bf16-edge-b33-l4096"].batch.live_lens
    assert len(b33) == 33 and max(b33) == 4096 and {1, 7, 8, 9, 15, 16, 17} <= set(b33)
    assert items["bf16-edge-b33-l4096"].batch == items["fp8_e4m3-edge-b33-l4096"].batch  # one batch per edge
    rand = [c for c in items if c.startswith("bf16-rand")]
    assert len(rand) == 4 and all("-s20261201-" in c for c in rand)  # the seed is in the id


def test_the_prefill_envelope_straddles_the_tile_switch() -> None:
    items = [i for i in _items("numerics-envelope-prefill") if i.params.live_v == "bf16"]
    tokens = {sum(i.params.batch.q_lens) for i in items}
    # 8 KV heads: 128-row tiles fill 132 SMs from 17 tiles per head on, 2,176 rows = 544 tokens of group 4.
    assert {2, 543, 544, 4096} <= tokens
    # One query per request is a decode launch: no prefill cell may qualify the decode kernel in its place.
    assert all(max(i.params.batch.q_lens) > 1 for i in items)
    blocks = {prefill_config(4, 128, rows=t * 4, num_kv_heads=8).block_m for t in tokens}
    assert blocks == {64, 128}
    assert all(q <= n for i in items for q, n in zip(i.params.batch.q_lens, i.params.batch.live_lens, strict=True))


def _gate(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "g.yaml"
    path.write_text("suite: s\nversion: 1\ngates:\n" + textwrap.indent(textwrap.dedent(body), "  "))
    return path


def test_an_envelope_gate_must_fix_its_shape_itself(tmp_path: Path) -> None:
    path = _gate(
        tmp_path,
        """\
        - id: env
          kind: kernel_numerics
          head_dim: 128
          num_qo_heads: 32
          num_kv_heads: 8
          cartridge: {id: c, length: 632}
          envelope: {max_batch: 40}
          matrix:
            phase: [decode, prefill]
        """,
    )
    with pytest.raises(GateFileError, match=r"g\.yaml:10:\d+: gate 'env': envelope: an envelope gate sets phase"):
        compile_gate_file(path, default_registry())


# A decode envelope gate of the Qwen3-8B shape; {envelope} is filled in per test.
DECODE_ENVELOPE_GATE = """\
- id: env
  kind: kernel_numerics
  phase: decode
  head_dim: 128
  num_qo_heads: 32
  num_kv_heads: 8
  cartridge: {{id: c, length: 632}}
  envelope: {envelope}
"""


def test_envelope_fields_are_validated_at_their_line(tmp_path: Path) -> None:
    path = _gate(tmp_path, DECODE_ENVELOPE_GATE.format(envelope="{max_batch: 0}"))
    with pytest.raises(GateFileError, match=r"g\.yaml:11:\d+: .*max_batch: Input should be greater than or equal to 1"):
        compile_gate_file(path, default_registry())


def test_qualify_list_names_the_configuration_each_cell_dispatches(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", str(GATES)]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("numerics-")}
    assert (
        "decode m16n128r2w4s3c64x4p g4 d128 p8 (batch 32, max live 1)"
        in lines["numerics-envelope-decode[bf16-edge-b32-l1]"]
    )
    assert "decode m16n128r1w4s3" in lines["numerics-envelope-decode[bf16-edge-b31-l1]"]
    assert "decode m16n128r1w4s2k16" in lines["numerics-envelope-decode[bf16-edge-b1-l4096]"]  # split 16 ways
    assert "must be rejected" in lines["numerics-extended[prefill-bf16-16-c632-ragged]"]


@pytest.mark.parametrize("where", ["matrix", "defaults"])
def test_an_envelope_gate_sets_its_cascade_itself(tmp_path: Path, where: str) -> None:
    # A decode_cascade the cells run with but the envelope never saw would put the default dispatch's edges under
    # cascade cells: the gate would read as covering regions it never probed.
    gate = DECODE_ENVELOPE_GATE.format(envelope="{min_batch: 16, max_batch: 40}")
    path = tmp_path / "g.yaml"
    if where == "matrix":
        _gate(tmp_path, gate + "  matrix:\n    decode_cascade: [true]\n")
    else:
        defaults = "suite: s\nversion: 1\ndefaults:\n  decode_cascade: true\ngates:\n"
        path.write_text(defaults + textwrap.indent(gate, "  "))
    with pytest.raises(GateFileError, match=r"'decode_cascade' is read by the gate's envelope: set it on the gate"):
        compile_gate_file(path, default_registry())
    # Set on the gate, the envelope expands the cascade's own regions (min_batch keeps them to batch 16 on).
    _gate(tmp_path, gate + "  decode_cascade: true\n")
    items = compile_gate_file(path, default_registry()).items
    assert items and all(i.params.decode_cascade for i in items)
    assert min(len(i.params.batch.live_lens) for i in items) == 16


def test_lint_keeps_cascade_and_min_batch_to_decode_cells() -> None:
    from qualify.kinds.kernel_numerics.params import lint
    from qualify.numerics.cell import KernelNumericsParams

    cell = {"cartridge": {"id": "c", "length": 632}, "batch": {"id": "b", "live_lens": [9], "q_lens": [3]}}
    decode = KernelNumericsParams.model_validate({**cell, "phase": "decode", "decode_cascade": True,
                                                  "envelope": {"min_batch": 16}})  # fmt: skip
    assert lint(decode, None) == []
    prefill = KernelNumericsParams.model_validate({**cell, "phase": "prefill", "decode_cascade": False,
                                                   "envelope": {"min_batch": 16}})  # fmt: skip
    assert [i.field for i in lint(prefill, None)] == [("decode_cascade",), ("envelope", "min_batch")]


def test_the_gluon_envelope_straddles_the_gluon_tile_switch() -> None:
    # The Gluon prefill leaves its small-grid tiles at half the SMs' programs (9 tiles per KV head: 1,152 rows = 288
    # tokens of group 4), not the Triton prefill's 544 tokens, and its two-per-SM tiles past 16,384 rows (4,096
    # tokens) for 128-row tiles on a persistent grid: its envelope's edges are its own, and it reaches past the last.
    path = Path(__file__).parents[2] / "gates" / "kernel_numerics_gluon.yaml"
    items = [i for i in compile_gate_file(path, default_registry()).items
             if i.gate_id == "gluon-envelope-p8" and i.params.live_v == "bf16"]  # fmt: skip
    assert items and all(i.params.prefill_impl == "gluon" for i in items)
    tokens = {sum(i.params.batch.q_lens) for i in items}
    assert {2, 287, 288, 4096, 4097} <= tokens and 543 not in tokens
    tiles = {t: prefill_config(4, 128, rows=t * 4, num_kv_heads=8, impl="gluon").tag for t in (287, 288, 4096, 4097)}
    assert tiles == {287: "m64n128r1w4s2gl", 288: "m64n64r1w4s2gl", 4096: "m64n64r1w4s2gl", 4097: "m128n128r1w4s3glp"}


def test_every_gluon_envelope_reaches_every_tile_its_dispatch_takes() -> None:
    # A tile choice past an envelope's largest batch would ship unqualified for that group and head_dim, and so would
    # a live V width no envelope of the shape runs: each width is its own build, and past the two-per-SM cut its own
    # ring depth.
    path = Path(__file__).parents[2] / "gates" / "kernel_numerics_gluon.yaml"
    by_gate: dict[tuple[str, int], set[str]] = {}
    shapes: dict[str, tuple[int, int, int]] = {}
    bits = {"bf16": 16, "fp8_e4m3": 8}
    for i in compile_gate_file(path, default_registry()).items:
        if not i.gate_id.startswith("gluon-envelope"):
            continue
        p = i.params
        group = p.num_qo_heads // p.num_kv_heads
        rows = sum(p.batch.q_lens) * group
        cfg = prefill_config(group, p.head_dim, rows=rows, num_kv_heads=p.num_kv_heads, impl="gluon",
                             live_v_bits=bits[p.live_v])  # fmt: skip
        by_gate.setdefault((i.gate_id, bits[p.live_v]), set()).add(cfg.tag)
        shapes[i.gate_id] = (group, p.head_dim, p.num_kv_heads)
    assert len(shapes) >= 10
    widths_by_shape: dict[tuple[int, int, int], set[int]] = {}
    for gate_id, live_bits in by_gate:
        widths_by_shape.setdefault(shapes[gate_id], set()).add(live_bits)
    assert {s: w for s, w in widths_by_shape.items() if w != {8, 16}} == {}
    for (gate_id, live_bits), tags in by_gate.items():
        group, head_dim, kv = shapes[gate_id]
        shipped = {r.config.tag for r in prefill_regions(group, head_dim, kv, 1 << 17, "gluon", live_bits)}
        assert tags == shipped, (gate_id, live_bits)


def test_an_envelope_gate_sets_its_prefill_implementation_itself(tmp_path: Path) -> None:
    # From `defaults`, the cells would run the Gluon prefill at the Triton prefill's edges.
    gate = textwrap.dedent("""\
        - id: e
          kind: kernel_numerics
          phase: prefill
          head_dim: 128
          num_qo_heads: 32
          num_kv_heads: 8
          page_size: 8
          cartridge: {id: c, length: 632, sink: true}
          envelope: {max_query_tokens: 1024, random_batches: 1, seed: 3}
        """)  # fmt: skip
    path = tmp_path / "g.yaml"
    path.write_text("suite: s\nversion: 1\ndefaults:\n  prefill_impl: gluon\ngates:\n" + textwrap.indent(gate, "  "))
    with pytest.raises(GateFileError, match=r"'prefill_impl' is read by the gate's envelope: set it on the gate"):
        compile_gate_file(path, default_registry())
