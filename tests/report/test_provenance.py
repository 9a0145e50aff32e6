from __future__ import annotations

import json
import random
import subprocess
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from qualify.report import provenance
from qualify.report.provenance import (
    build_meta,
    collect_provenance,
    filter_environment,
    package_version,
    redact_argv,
)

START = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
END = START + timedelta(seconds=90)


def _collect(repo_root: Path, environ: dict[str, str] | None = None, argv: list[str] | None = None):
    return collect_provenance(argv or ["pytest", "gates"], repo_root, START, END, environ=environ or {})


def test_environment_allowlist_and_secret_denylist():
    environ = {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "GITHUB_RUN_ID": "123",
        "GITHUB_SHA": "abc",
        "CI": "true",
        "TRITON_INTERPRET": "1",
        "QUALIFY_BASELINE": "reports/base.dsse.json",
        "HOME": "/root",
        "PATH": "/usr/bin",
        "AWS_SECRET_ACCESS_KEY": "s1",
        "HF_TOKEN": "s2",
        "GITHUB_TOKEN": "s3",
        "QUALIFY_SIGNING_KEY": "-----BEGIN PRIVATE KEY-----",
        "QUALIFY_SECRET": "s4",
        "QUALIFY_DB_PASSWORD": "s5",
        "QUALIFY_api_token": "s6",
    }
    assert filter_environment(environ) == {
        "CI": "true",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "GITHUB_RUN_ID": "123",
        "GITHUB_SHA": "abc",
        "QUALIFY_BASELINE": "reports/base.dsse.json",
        "TRITON_INTERPRET": "1",
    }


def test_secret_names_are_dropped_even_when_allowlisted(monkeypatch):
    # Guards the rule itself: were a secret-looking name ever allowlisted, it must still be dropped.
    from qualify.report import provenance

    monkeypatch.setattr(provenance, "_ENV_ALLOWLIST", frozenset({"CI", "GITHUB_TOKEN", "RUNNER_KEY"}))
    assert filter_environment({"CI": "1", "GITHUB_TOKEN": "s", "RUNNER_KEY": "s"}) == {"CI": "1"}


def test_collect_uses_only_the_filtered_environment(tmp_path):
    provenance = _collect(tmp_path, {"CI": "true", "HF_TOKEN": "hf_secret", "USER": "me"})
    assert provenance.environment == {"CI": "true"}
    assert "hf_secret" not in json.dumps(provenance.model_dump(mode="json"))


def test_works_outside_a_git_repository(tmp_path):
    provenance = _collect(tmp_path)
    assert provenance.git.commit == "unknown" and provenance.git.dirty == "unknown"


def test_works_without_git_or_nvidia_smi_installed(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no executables at all
    provenance = _collect(Path(__file__).parent)
    assert provenance.git.commit == "unknown"
    assert provenance.nvidia_smi is None


def test_reads_commit_and_dirty_flag_of_a_repository(tmp_path):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    try:
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git is not usable here")
    (tmp_path / "a.txt").write_text("a")
    subprocess.run([*git, "add", "a.txt"], cwd=tmp_path, check=True, capture_output=True)
    subprocess.run([*git, "commit", "-qm", "a"], cwd=tmp_path, check=True, capture_output=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout
    clean = _collect(tmp_path)
    assert clean.git.commit == head.strip() and clean.git.dirty is False
    (tmp_path / "a.txt").write_text("b")
    assert _collect(tmp_path).git.dirty is True


def test_versions_are_null_for_absent_packages(tmp_path):
    assert package_version("no-such-distribution-for-qualify-tests") is None
    assert package_version("no-such-distribution-for-qualify-tests", "pydantic") is not None
    versions = _collect(tmp_path).versions
    assert set(versions) == {
        "torch", "triton", "transformers", "flashinfer", "flashinfer-commit", "vllm", "lm-eval", "gguf",
        "cryptography", "pydantic", "cartridge-qualify",
    }  # fmt: skip
    assert versions["pydantic"] and versions["cryptography"] and versions["cartridge-qualify"]
    for name, version in versions.items():
        assert version is None or isinstance(version, str), name


def _unpacked_package(root: Path, name: str, meta: str) -> None:
    """A package as the SM90 host unpacks FlashInfer: no distribution metadata, and an import that must not run."""
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (root / name / "_build_meta.py").write_text(meta)


def test_a_package_without_metadata_is_versioned_from_its_build_meta_without_importing_it(
    tmp_path, monkeypatch, test_seed
):
    rng = random.Random(test_seed)
    version, commit = f"0.{rng.randrange(100)}.{rng.randrange(10)}.post1", f"{rng.getrandbits(160):040x}"
    # Read, never run: the file's own last line would raise.
    meta = (f'"""Build metadata."""\n__version__: str = "{version}"\n__git_commit__ = "{commit}"\nBUILD = 3\n'
            'raise RuntimeError("executed")\n')  # fmt: skip
    _unpacked_package(tmp_path, "fake_fi_unpacked", meta)
    _unpacked_package(tmp_path, "fake_fi_broken", "__version__ = (\n")
    # FlashInfer's own build backend names the commit __git_version__.
    _unpacked_package(tmp_path, "fake_fi_wheel", f'__version__ = "{version}"\n__git_version__ = "{commit}"\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    assert build_meta("fake_fi_unpacked", "_build_meta.py") == {"__version__": version, "__git_commit__": commit}
    assert build_meta("fake_fi_broken", "_build_meta.py") == {}
    assert build_meta("fake_fi_unpacked", "no_such_file.py") == {}
    assert build_meta("no_such_package_for_qualify_tests", "_build_meta.py") == {}
    (tmp_path / "fake_fi_unpacked" / "sub").mkdir()
    assert build_meta("fake_fi_unpacked.sub", "_build_meta.py") == {}  # finding it would import the parent

    def versions_with(dist: str, package: str) -> tuple[str | None, str | None]:
        monkeypatch.setitem(provenance._DISTRIBUTIONS, "flashinfer", (dist,))
        monkeypatch.setitem(provenance._BUILD_META, "flashinfer", (package, "_build_meta.py"))
        versions = _collect(tmp_path).versions
        return versions["flashinfer"], versions["flashinfer-commit"]

    absent = "no-such-distribution-for-qualify-tests"
    assert versions_with(absent, "fake_fi_unpacked") == (version, commit)
    assert versions_with(absent, "fake_fi_wheel") == (version, commit)
    assert versions_with(absent, "fake_fi_broken") == (None, None)
    # Distribution metadata, where there is any, names the version; the build file still names the commit.
    assert versions_with("pydantic", "fake_fi_unpacked") == (package_version("pydantic"), commit)


def test_times_are_utc_iso8601_and_naive_times_are_refused(tmp_path):
    provenance = collect_provenance([], tmp_path, START.astimezone(timezone(timedelta(hours=2))), END, environ={})
    assert provenance.started_at == "2026-01-02T03:04:05.678Z"
    assert provenance.finished_at == "2026-01-02T03:05:35.678Z"
    assert provenance.duration_s == 90.0
    with pytest.raises(ValueError, match="timezone-aware"):
        collect_provenance([], tmp_path, START.replace(tzinfo=None), END, environ={})


def test_host_fields_are_filled_and_json_serialisable(tmp_path):
    provenance = _collect(tmp_path, argv=["pytest", "-k", "smoke"])
    assert provenance.command_line == ["pytest", "-k", "smoke"]
    assert provenance.python and provenance.os and provenance.hostname and provenance.cpu.model
    assert provenance.cpu.logical_cores is None or provenance.cpu.logical_cores >= 1
    if not provenance.cuda.available:
        assert provenance.cuda.devices == []
    json.dumps(provenance.model_dump(mode="json"))


def test_secret_option_values_are_redacted_from_the_command_line():
    assert redact_argv(["qualify", "--hf-token", "hf_x", "--api-key=k1", "--sign-key", "k.pem", "-k", "ppl"]) == [
        "qualify", "--hf-token", "<redacted>", "--api-key=<redacted>", "--sign-key", "<redacted>", "-k", "ppl",
    ]  # fmt: skip
