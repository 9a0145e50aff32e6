"""`nox -s bundle`: option parsing, target platform tags and the manifest, without touching the network."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("nox")
ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def noxfile() -> ModuleType:
    spec = importlib.util.spec_from_file_location("qualify_noxfile", ROOT / "noxfile.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is being made
    spec.loader.exec_module(module)
    return module


def test_defaults_target_python_312_manylinux_2_28_without_torch(noxfile: ModuleType) -> None:
    opts = noxfile.bundle_options([])
    assert (opts.python_version, opts.platform, opts.extras) == ("3.12", "manylinux_2_28_x86_64", ())
    assert "torch" in opts.exclude
    assert opts.folder == ROOT / "dist" / "bundle-3.12-manylinux_2_28_x86_64"


def test_options_are_parsed(noxfile: ModuleType) -> None:
    opts = noxfile.bundle_options(
        ["--python-version", "3.11", "--platform", "manylinux_2_34_aarch64", "--extras", "gpu, eval", "--include-torch"]
    )
    assert opts.python_version == "3.11" and opts.platform == "manylinux_2_34_aarch64"
    assert opts.extras == ("gpu", "eval") and opts.exclude == ()


def test_bad_python_version_is_a_usage_error(noxfile: ModuleType) -> None:
    with pytest.raises(SystemExit):
        noxfile.bundle_options(["--python-version", "twelve"])


def test_compatible_platforms_reach_back_to_manylinux2014(noxfile: ModuleType) -> None:
    tags = noxfile.compatible_platforms("manylinux_2_28_x86_64")
    assert tags[0] == "manylinux_2_28_x86_64" and "manylinux_2_17_x86_64" in tags
    assert "manylinux2014_x86_64" in tags and "manylinux_2_29_x86_64" not in tags
    assert noxfile.compatible_platforms("macosx_14_0_arm64") == ["macosx_14_0_arm64"]


def test_exclusion_patterns_match_normalised_names(noxfile: ModuleType) -> None:
    patterns = noxfile.BUNDLE_EXCLUDED
    assert noxfile._excluded("torch", patterns) and noxfile._excluded("nvidia_cublas_cu12", patterns)
    assert not noxfile._excluded("torchvision", patterns) and not noxfile._excluded("numpy", patterns)


def _wheel(folder: Path, name: str) -> Path:
    path = folder / name
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("x.txt", name)
    return path


def test_manifest_pins_every_wheel_with_its_sha256(noxfile: ModuleType, tmp_path: Path) -> None:
    wheels = [
        _wheel(tmp_path, "cartridge_qualify-0.1.0-py3-none-any.whl"),
        _wheel(tmp_path, "PyYAML-6.0.2-cp312-cp312-manylinux_2_17_x86_64.whl"),
    ]
    lock = noxfile.write_bundle_manifest(tmp_path).read_text().splitlines()
    assert len(lock) == 2
    for wheel in wheels:
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        assert any(line.endswith(f"# {wheel.name}") and f"--hash=sha256:{digest}" in line for line in lock)
    assert lock[0].startswith("cartridge-qualify==0.1.0 ") and lock[1].startswith("pyyaml==6.0.2 ")
    install = (tmp_path / "install.sh").read_text()
    assert "--no-index" in install and "--find-links" in install and "--require-hashes" in install
    assert (tmp_path / "install.sh").stat().st_mode & 0o111


def test_manifest_refuses_an_empty_folder(noxfile: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no wheels"):
        noxfile.write_bundle_manifest(tmp_path)
