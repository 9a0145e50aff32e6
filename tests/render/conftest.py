from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from _render_items import HOSTILE, synthetic_items, with_items
from _render_signed import Signed

from qualify.cli import main
from qualify.signing import sign_report
from qualify.signing.keys import load_private_key


def _gate_file(folder: Path) -> Path:
    (folder / "input.bin").write_bytes(b"qualified bytes")
    path = folder / "gates.yaml"
    description = json.dumps(f"Hostile description {HOSTILE}")
    path.write_text(
        textwrap.dedent(
            f"""
            suite: render-test
            version: 1
            gates:
              - id: bound
                kind: compare
                description: {description}
                requires: [cpu]
                limit: 1.0
                file: input.bin
                matrix:
                  value: [0.5, 0.25]
              - id: gpu-bound
                kind: compare
                requires: [sm90]
                limit: 1.0
                value: 0.5
            """
        ).lstrip()
    )
    return path


@pytest.fixture(scope="session")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Signed:
    """A real backbone run (the plug-in test kind `compare`) plus synthetic items of the plotted kinds, signed."""
    folder = tmp_path_factory.mktemp("signed")
    assert main(["keygen", "--out", str(folder / "keys")]) == 0
    assert main(["keygen", "--out", str(folder / "other")]) == 0
    out = folder / "run"
    assert main(["run", str(_gate_file(folder)), "--out", str(out), "--name", "base"]) == 0
    report = {**with_items(json.loads((out / "base.json").read_text()), synthetic_items()), "signed": True}
    report_bytes, envelope_bytes = sign_report(report, [], load_private_key(folder / "keys" / "signing-key.pem"))
    (folder / "report.json").write_bytes(report_bytes)
    (folder / "report.dsse.json").write_bytes(envelope_bytes)
    return Signed(
        envelope=folder / "report.dsse.json",
        report_path=folder / "report.json",
        report=report,
        public_key=folder / "keys" / "signing-key.pub.pem",
        other_public_key=folder / "other" / "signing-key.pub.pem",
    )
