"""lm-eval's command line with the `qualify-kv` model registered (lm-eval 0.4.13 discovers no model plugins).

    python -m qualify.accuracy.lm_eval_cli run --model qualify-kv \\
        --model_args pretrained=/models/Qwen3-8B,layout=K8/V8 \\
        --include_path qualify/accuracy/lm_eval_tasks --tasks cq_mmlu
"""

from __future__ import annotations

from qualify.accuracy.registration import register_lm_eval_model


def main() -> None:
    from lm_eval.__main__ import cli_evaluate

    register_lm_eval_model()
    cli_evaluate()


if __name__ == "__main__":
    main()
