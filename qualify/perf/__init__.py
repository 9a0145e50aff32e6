"""Performance measurement for the `perf_nonregression` gate kind.

Depends on `qualify.serve` (the serving layouts and engine it measures), never the other way round.

The gate compares a candidate implementation with a baseline (another implementation, or the same
candidate in the last release's signed report) on the ratio of medians of repeated timings, decided on
the ratio's bootstrap CI (`qualify.stats.ratio`).

Modules, each with one job:
  spec              the typed request/result models exchanged with the worker process (no torch)
  metrics           the metrics, their direction and unit (no torch)
  implementations   the one table of implementations, grouped into sets (`kernel`, `engine`, `serving`): name, metrics,
                    builder, bytes layout; every other module reads names from it (no torch)
  bytes_model       bytes a layout of K and V moves per decode step / TTFT (no torch)
  launch            runs one worker in a fresh process (and the optional ncu-profiled one)
  worker            `python -m qualify.perf.worker`: the fresh process that measures one implementation
  timing            CUDA-graph replay timed with CUDA events; device copy bandwidth (torch)
  gpu_info          clocks, GPU name and versions, read (never set) through nvidia-smi and torch
  kernel_set        the `kernel` set's builders (fused cartridge kernel, FlashInfer layouts) and measure (torch)
  engine_set        the `engine` set's measure: vLLM serving a cartridge, one process per layout
  serving_set       the `serving` set's measure: a request stream per layout with equal KV memory
  engine_summary    the engine-level table of per-layout runs (`qualify serve-summary`)
  compare           one (metric, batch, suffix) cell of candidate vs baseline -> Check + measurements
  baseline_report   samples of a signed release report, read only after its signature verifies
  ncu               Nsight Compute command line and CSV parsing
"""
