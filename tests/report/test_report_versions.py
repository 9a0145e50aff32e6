"""Report format version 2 (each threshold once, typed measurements) and reading reports written before it.

tests/report/v1_reports/ holds version-1 reports as they were recorded (H200 accuracy, numerics and perf runs,
and a CPU loss run); `qualify render` must still read them, checked against the schema they were written under.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _recorded import recorded

from qualify.cli import main
from qualify.kinds.perf_nonregression.summary import table_rows
from qualify.render.markdown import render_markdown
from qualify.render.source import load_input
from qualify.report.schema import REPORT_VERSION, SCHEMA_PATH, current_schema, schema_for

V1 = sorted((Path(__file__).parent / "v1_reports").glob("*.json"))


def test_the_shipped_schema_is_what_the_kinds_models_generate() -> None:
    # Regenerate with `python -m qualify.report.schema --write` after changing a measurements model.
    assert json.loads(SCHEMA_PATH.read_text()) == current_schema()


def test_the_schema_keeps_thresholds_out_of_parameters_and_measurements() -> None:
    schema = current_schema()
    generated = [r for r in schema["$defs"]["item"]["allOf"] if "x-generated-from" in r]
    rules = {r["if"]["properties"]["kind"]["const"]: r["then"]["properties"] for r in generated}
    assert rules["loss_increase"]["parameters"]["not"] == {"anyOf": [{"required": ["max_rel_increase"]}]}
    assert rules["loss_increase"]["parameters"]["properties"]["positive_control"]["not"] == {
        "anyOf": [{"required": ["minimum"]}]
    }
    assert rules["perf_nonregression"]["parameters"]["not"] == {"anyOf": [{"required": ["thresholds"]}]}
    perf = schema["$defs"]["perf_nonregression.PerfNonRegressionMeasurements"]
    assert "threshold" not in perf["properties"] and perf["additionalProperties"] is False
    assert "max_rel_increase" not in schema["$defs"]["loss_increase.LayoutLoss"]["properties"]


@pytest.mark.parametrize("path", V1, ids=lambda p: p.stem)
def test_version_1_reports_validate_against_their_own_schema(path: Path) -> None:
    report = json.loads(path.read_text())
    assert report["report_version"] == 1 < REPORT_VERSION
    assert schema_for(report)["properties"]["report_version"] == {"const": 1}
    assert load_input(path).schema_errors == []


@pytest.mark.parametrize("path", V1, ids=lambda p: p.stem)
def test_version_1_reports_render_with_their_measurements(path: Path, tmp_path: Path) -> None:
    report = json.loads(path.read_text())
    assert main(["render", str(path), "-o", str(tmp_path / "page.html")]) == 0
    page = (tmp_path / "page.html").read_text()
    kinds = {i["kind"] for i in report["items"]}
    drawn = {
        "loss_increase": "plot-loss'><h3>Eval-loss increase per layout and checkpoint</h3><svg",
        "accuracy_floor": "plot-accuracy'><h3>Accuracy as a percentage of BF16</h3><svg",
        "perf_nonregression": "plot-perf'><h3>Performance ratio per batch</h3><svg",
        "kernel_numerics": "class='grid'",
    }
    for kind in kinds:
        assert drawn[kind] in page, kind
        assert f"No {kind} items in this report." not in page
    # Measurements read through the typed models: a plot that could not read them would say "no data".
    assert ">no data<" not in page
    assert render_markdown(load_input(path)).startswith("## ")


def test_version_1_loss_report_draws_each_bound_from_its_check(tmp_path: Path) -> None:
    path = next(p for p in V1 if p.stem.startswith("loss"))
    assert main(["render", str(path), "-o", str(tmp_path / "page.html")]) == 0
    plot = (tmp_path / "page.html").read_text().split("id='plot-loss'")[1].split("</figure>")[0]
    assert "; bound 0.5 %" in plot  # the K16/V8 bound, 0.005, stated by the check only


def test_perf_summary_reads_thresholds_from_the_checks_of_a_version_1_report() -> None:
    report = json.loads(next(p for p in V1 if p.stem.startswith("perf")).read_text())
    rows = {row[0]: row for row in table_rows(report)}
    for item in report["items"]:
        if "ratio" in item["measurements"]:  # the version-1 copy and the check must agree in the table
            op = ">=" if item["measurements"]["direction"] == "higher" else "<="
            assert rows[item["name"]][10] == f"{op} {item['checks'][0]['threshold']:.4g}"
            assert item["checks"][0]["threshold"] == item["measurements"]["threshold"]


SIGNED_V1 = [  # (envelope, public key) of version-1 runs recorded before the format change
    ("2026-11-29-numerics-h200/numerics-h200.dsse.json", "2026-11-29-numerics-h200/numerics-h200.pub.pem"),
    ("2026-12-01-perf-h200-process-t/run1.dsse.json", "2026-12-01-perf-h200-process-t/run1-signing-key.pub.pem"),
]


@pytest.mark.parametrize(("envelope", "key"), SIGNED_V1, ids=lambda p: p.split("/")[0])
def test_signed_version_1_envelopes_still_verify_and_render(
    envelope: str, key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env, pub = recorded(envelope, tmp_path), recorded(key, tmp_path)
    assert main(["verify", str(env), "--key", str(pub)]) == 0
    assert "OK:" in capsys.readouterr().out
    page = tmp_path / "page.html"
    assert main(["render", str(env), "--key", str(pub), "-o", str(page)]) == 0
    html = page.read_text()
    assert "signature: valid (key id" in html
    # A byte changed in the payload breaks the signature for both commands.
    doc = json.loads(env.read_text())
    doc["payload"] = doc["payload"][:-8] + ("A" if doc["payload"][-8] != "A" else "B") + doc["payload"][-7:]
    tampered = tmp_path / "tampered.dsse.json"
    tampered.write_text(json.dumps(doc))
    assert main(["verify", str(tampered), "--key", str(pub)]) == 1


def test_each_earlier_version_is_read_with_its_own_schema() -> None:
    assert REPORT_VERSION == 5
    for version in (1, 2, 3, 4):
        assert schema_for({"report_version": version})["properties"]["report_version"] == {"const": version}
    current = schema_for({"report_version": REPORT_VERSION})
    assert current["properties"]["report_version"] == {"const": 5}
    assert "workers_per_gpu" in current["properties"]["gpus"]["properties"]
    v4 = schema_for({"report_version": 4})
    assert (
        "workers_per_gpu" not in v4["properties"]["gpus"]["properties"] and "gpu" in v4["$defs"]["item"]["properties"]
    )
    assert "gpus" in current["properties"] and "gpu" in current["$defs"]["item"]["properties"]
    v3 = schema_for({"report_version": 3})
    assert "gpus" not in v3["properties"] and "gpu" not in v3["$defs"]["item"]["properties"]
    assert "coverage" in current["properties"] and "shared_setup_s" in current["$defs"]["item"]["properties"]
    v2 = schema_for({"report_version": 2})
    assert "coverage" not in v2["properties"] and "shared_setup_s" not in v2["$defs"]["item"]["properties"]
