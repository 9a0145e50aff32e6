"""lm-eval's command line with the `qualify-kv` model registered (lm-eval 0.4.13 discovers no model plugins).

    qualify lm-eval run --model qualify-kv \\
        --model_args pretrained=/models/Qwen3-8B,layout=K8/V8 \\
        --include_path qualify/accuracy/lm_eval_tasks --tasks cq_mmlu
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def run_lm_eval(argv: Sequence[str]) -> int:
    """Run lm-eval's CLI on `argv` (its subcommand first: run, ls, validate); its exit status."""
    from lm_eval.__main__ import cli_evaluate

    from qualify.accuracy.registration import register_lm_eval_model

    register_lm_eval_model()
    # lm-eval parses sys.argv itself (and may insert into it): hand it a fresh one and put ours back after.
    saved = sys.argv
    sys.argv = ["lm-eval", *argv]
    try:
        cli_evaluate()
    except SystemExit as exc:  # argparse and lm-eval exit with a status: pass it on as qualify's exit code
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 1
        return exc.code or 0
    finally:
        sys.argv = saved
    return 0
