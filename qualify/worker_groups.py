"""The run-wide state gate items share, named once: items of one group run in one pytest-xdist worker under
`qualify run --gpus` (`GateKindSpec.worker_group`), so what one item builds the next one reuses."""

# Timed items: they reuse each other's measured worker processes (the baseline's above all), and one GPU times them
# one after another.
TIMING = "timing"
# Items that read the run's store of serving-path scores and generations (qualify.serve.score_processes).
SERVING = "serving"
# Items that reuse lm-eval's live vLLM engines (accuracy_floor, backend vllm).
LM_EVAL_VLLM = "lm-eval-vllm"
