"""Performance measurement for the `perf_nonregression` gate kind.

The gate compares a candidate implementation with a baseline (another implementation, or the same
candidate in the last release's signed report) on the ratio of medians of repeated timings, decided on
the ratio's bootstrap CI (`qualify.stats.ratio`).

Modules, each with one job:
  spec              the typed request/result models exchanged with the worker process (no torch)
  metrics           the metrics, their direction and unit (no torch)
  implementations   the registry of implementation *sets* (`kernel` now, `engine` later; no torch)
  bytes_model       bytes each implementation moves per decode step / TTFT (no torch)
  launch            runs one worker in a fresh process (and the optional ncu-profiled one)
  worker            `python -m qualify.perf.worker`: the fresh process that measures one implementation
  timing            CUDA-graph replay timed with CUDA events; device copy bandwidth (torch)
  gpu_info          clocks, GPU name and versions, read (never set) through nvidia-smi and torch
  kernel_set        the `kernel` implementation set: fused cartridge kernel and FlashInfer layouts (torch)
  compare           one (metric, batch, suffix) cell of candidate vs baseline -> Check + measurements
  baseline_report   samples of a signed release report, read only after its signature verifies
  ncu               Nsight Compute command line and CSV parsing
  summary           the comparison table of a report, and the run-to-run CI check of two reports
"""
