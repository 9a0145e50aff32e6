"""The page's inline stylesheet (no external fonts or files: the report must open offline)."""

CSS = """
:root { --pass: #1a7f37; --fail: #cf222e; --warn: #9a6700; --none: #6e7781; --err: #8250df;
  --line: #d0d7de; --bg-soft: #f6f8fa; font-family: system-ui, -apple-system, "Segoe UI", Roboto,
  "Liberation Sans", sans-serif; color: #1f2328; background: #fff; }
body { margin: 0 auto; max-width: 1180px; padding: 24px; line-height: 1.4; }
h1 { font-size: 1.5rem; margin: 0 0 12px; } h2 { border-bottom: 1px solid var(--line); padding-bottom: 4px;
  margin-top: 36px; } h3 { margin: 24px 0 6px; }
code, .mono { font-family: ui-monospace, "DejaVu Sans Mono", "Liberation Mono", monospace; font-size: 0.85em;
  word-break: break-all; }
.banner { display: flex; flex-wrap: wrap; gap: 12px; align-items: stretch; margin-bottom: 12px; }
.badge { border-radius: 8px; padding: 10px 16px; color: #fff; font-weight: 700; }
.badge.big { font-size: 1.6rem; letter-spacing: 0.04em; }
.badge small { display: block; font-size: 0.8rem; font-weight: 400; opacity: 0.95; }
.v-PASS, .sig-valid { background: var(--pass); } .v-FAIL, .sig-invalid { background: var(--fail); }
.v-INCOMPLETE, .v-UNKNOWN, .sig-unsigned, .sig-not_checked { background: var(--warn); }
.warning { border-left: 6px solid var(--fail); background: #ffebe9; padding: 8px 12px; margin: 8px 0; }
.caution { border-left: 6px solid var(--warn); background: #fff8c5; padding: 8px 12px; margin: 8px 0; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 0.88rem; }
th, td { border: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
thead th { background: var(--bg-soft); } td.num { text-align: right; font-variant-numeric: tabular-nums; }
.scroll { overflow-x: auto; }
.status { font-weight: 700; border-radius: 4px; padding: 1px 6px; color: #fff; white-space: nowrap; }
.status.passed, .status.pass { background: var(--pass); } .status.failed, .status.fail { background: var(--fail); }
.status.skipped { background: var(--none); } .status.error { background: var(--err); }
.status.inconclusive, .status.incomplete { background: var(--warn); } .status.deselected { background: var(--none); }
.protects { color: #59636e; margin: 0 0 6px; }
.kv th { width: 14em; background: var(--bg-soft); }
figure { margin: 8px 0 20px; } figcaption { color: #59636e; font-size: 0.85rem; }
svg { max-width: 100%; height: auto; font-family: inherit; }
svg .grid { stroke: #eaeef2; } svg .axis { stroke: #57606a; stroke-width: 1.2; }
svg .tick { font-size: 11px; fill: #57606a; } svg .small { font-size: 9.5px; }
svg .label { font-size: 12px; fill: #1f2328; } svg .group { font-size: 11.5px; fill: #1f2328; font-weight: 600; }
svg .note { font-size: 11px; fill: var(--warn); }
svg .bar-selected { fill: var(--pass); } svg .bar-keyquant { fill: var(--fail); }
svg .bar-reference { fill: #8c959f; } svg .bar-other { fill: #0969da; }
svg .ci { stroke: #1f2328; stroke-width: 1.4; }
svg .threshold { stroke: var(--fail); stroke-width: 2; stroke-dasharray: 5 3; }
svg .ref-line { stroke: #0969da; stroke-width: 1.2; stroke-dasharray: 4 3; }
svg .not-run-area { fill: #f6f8fa; stroke: #afb8c1; stroke-dasharray: 3 3; }
svg .not-run { font-size: 11px; fill: var(--none); font-style: italic; }
svg .mark-pass { fill: var(--pass); } svg .mark-fail { fill: var(--fail); }
svg .mark-inconclusive { fill: var(--warn); } svg .mark-none { fill: var(--none); }
svg .hollow { fill: #fff; stroke-width: 2.5; } svg .hollow.mark-pass { stroke: var(--pass); }
svg .hollow.mark-fail { stroke: var(--fail); } svg .hollow.mark-inconclusive { stroke: var(--warn); }
svg .status-text { font-size: 10.5px; font-weight: 700; } svg .status-text.passed { fill: var(--pass); }
svg .status-text.failed { fill: var(--fail); } svg .status-text.skipped { fill: var(--none); }
svg .status-text.error { fill: var(--err); } svg .status-text.inconclusive { fill: var(--warn); }
table.grid td.cell { text-align: center; min-width: 6em; font-size: 0.8rem; }
.cell.passed { background: #dafbe1; } .cell.failed { background: #ffebe9; color: var(--fail); font-weight: 700; }
.cell.skipped { background: #eaeef2; color: var(--none); font-style: italic; }
.cell.error { background: #fbefff; color: var(--err); font-weight: 700; } .cell.absent { color: #afb8c1; }
.cell.informational { outline: 2px dashed #8c959f; outline-offset: -4px; }
.legend span { display: inline-block; padding: 2px 8px; margin-right: 6px; font-size: 0.8rem; }
.absent-kind { color: #59636e; font-style: italic; }
footer { margin-top: 40px; color: #59636e; font-size: 0.8rem; }
@media print { body { max-width: none; } .scroll { overflow: visible; } }
"""
