"""Shards across runners: `qualify run --shard K/N` runs a deterministic share and signs a shard report;
`qualify merge` gives the verdict and items of one serial run, and refuses shards that do not make up one run."""

from __future__ import annotations

import base64
import json
import textwrap
from pathlib import Path

import pytest

from qualify.cli import main
from qualify.shard_plan import read_durations

VALUES = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]


def _gate(tmp_path: Path, values: list[float] = VALUES, limit: float = 1.0, name: str = "g.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(f"""\
        suite: s
        version: 1
        gates:
          - id: a
            kind: compare
            requires: [cpu]
            limit: {limit}
            matrix:
              value: {json.dumps(values)}
        """))  # fmt: skip
    return path


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    assert main(["keygen", "--out", str(tmp_path / "keys")]) == 0
    return tmp_path / "keys" / "signing-key.pem", tmp_path / "keys" / "signing-key.pub.pem"


def _shards(tmp_path: Path, gate: Path, key: Path, n: int, *extra: str) -> list[Path]:
    out = []
    for k in range(1, n + 1):
        code = main(["run", str(gate), "--shard", f"{k}/{n}", "--out", str(tmp_path / "sh"), "--name", f"s{k}",
                     "--sign-key", str(key), *extra])  # fmt: skip
        assert code in (0, 1)  # a shard alone is INCOMPLETE (the rest is deselected) unless an item of it failed
        out.append(tmp_path / "sh" / f"s{k}.dsse.json")
    return out


def _merge(tmp_path: Path, shards: list[Path], pub: Path, key: Path | None = None, *extra: str) -> int:
    args = ["merge", *map(str, shards), "--key", str(pub), "--out", str(tmp_path / "m"), *extra]
    return main(args + (["--sign-key", str(key)] if key else []))


def _summary(report: dict) -> list[tuple]:
    return sorted((i["name"], i["status"], tuple(c["observed"] for c in i["checks"])) for i in report["items"])


@pytest.mark.parametrize("limit", [1.0, 0.55], ids=["all-pass", "some-fail"])
def test_merged_shards_give_the_serial_verdict_and_items(tmp_path: Path, keys: tuple[Path, Path], limit: float) -> None:
    key, pub = keys
    gate = _gate(tmp_path, limit=limit)
    serial_code = main(["run", str(gate), "--out", str(tmp_path / "serial"), "--name", "r"])
    serial = json.loads((tmp_path / "serial" / "r.json").read_text())
    shards = _shards(tmp_path, gate, key, 3)
    plain = [json.loads(p.with_name(p.name.replace(".dsse", "")).read_text()) for p in shards]
    owned = [set(r["shard"]["items"]) for r in plain]
    assert set().union(*owned) == {i["name"] for i in serial["items"]} and sum(map(len, owned)) == len(VALUES)
    # A shard alone never passes: the items of the other shards are recorded as deselected ("runs in shard j/3").
    assert all(r["verdict"] in ("INCOMPLETE", "FAIL") and r["counts"]["deselected"] == len(VALUES) - len(o)
               for r, o in zip(plain, owned, strict=True))  # fmt: skip
    code = _merge(tmp_path, shards, pub, key, "--name", "m")
    merged = json.loads((tmp_path / "m" / "m.json").read_text())
    assert (
        (code, merged["verdict"]) == (serial_code, serial["verdict"]) == ((0, "PASS") if limit == 1.0 else (1, "FAIL"))
    )
    assert _summary(merged) == _summary(serial)
    assert merged["counts"] == serial["counts"] and merged["gate_files"] == serial["gate_files"]
    assert [m["index"] for m in merged["merged_from"]] == [1, 2, 3]
    assert main(["verify", str(tmp_path / "m" / "m.dsse.json"), "--key", str(pub), "--subject",
                 str(tmp_path / "m" / "m.json")]) == 0  # fmt: skip
    assert main(["render", str(tmp_path / "m" / "m.dsse.json"), "--key", str(pub), "-o",
                 str(tmp_path / "m" / "m.html")]) == 0  # fmt: skip


def test_missing_duplicated_or_foreign_shards_are_refused_and_nothing_is_written(
    tmp_path: Path, keys: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    key, pub = keys
    gate = _gate(tmp_path)
    s1, s2, s3 = _shards(tmp_path, gate, key, 3)
    (tmp_path / "seed").mkdir()
    reseeded = _shards(tmp_path / "seed", gate, key, 3, "--seed", "7")
    gate.write_text(gate.read_text().replace("0.9]", "0.95]"))  # the same file, edited between shard runs
    (tmp_path / "edited").mkdir()
    changed = _shards(tmp_path / "edited", gate, key, 3)
    capsys.readouterr()
    cases = [
        ([s1, s2], "shard 3/3 missing"),
        ([s1, s1, s3], "shard 1/3 given twice"),
        ([s1, s2, changed[2]], "the gate files (path, sha256, suite, version, items) differs"),
        ([s1, s2, reseeded[2]], "the seed differs"),
    ]
    for shards, message in cases:
        assert _merge(tmp_path, shards, pub, key) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "m").exists()


def test_a_tampered_or_unsharded_envelope_is_refused(
    tmp_path: Path, keys: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    key, pub = keys
    gate = _gate(tmp_path)
    s1, s2, s3 = _shards(tmp_path, gate, key, 3)
    env = json.loads(s2.read_text())
    payload = json.loads(base64.b64decode(env["payload"]))
    payload["predicate"]["shard"]["items"] = []  # claim to own nothing
    env["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    forged = tmp_path / "forged.dsse.json"
    forged.write_text(json.dumps(env))
    assert main(["run", str(gate), "--out", str(tmp_path / "full"), "--name", "f", "--sign-key", str(key)]) == 0
    capsys.readouterr()
    assert _merge(tmp_path, [s1, forged, s3], pub, key) == 2
    assert "does not verify" in capsys.readouterr().err
    assert _merge(tmp_path, [s1, tmp_path / "full" / "f.dsse.json", s3], pub, key) == 2
    assert "not a shard report" in capsys.readouterr().err


def test_a_deselected_item_inside_a_shard_keeps_the_merge_incomplete_and_strict_fails(
    tmp_path: Path, keys: tuple[Path, Path]
) -> None:
    key, pub = keys
    gate = _gate(tmp_path)
    shards = _shards(tmp_path, gate, key, 2, "-k", "not 0.5")
    assert _merge(tmp_path, shards, pub, key, "--name", "m") == 0
    merged = json.loads((tmp_path / "m" / "m.json").read_text())
    assert merged["verdict"] == "INCOMPLETE" and merged["counts"]["deselected"] == 1
    assert _merge(tmp_path, shards, pub, key, "--name", "m2", "--strict") == 3
    assert main(["run", str(gate), "--shard", "1/2", "--strict", "--sign-key", str(key), "--out", str(tmp_path)]) == 2


def test_shards_balanced_by_an_earlier_reports_durations(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    key, pub = keys
    gate = _gate(tmp_path)
    assert main(["run", str(gate), "--out", str(tmp_path / "prev"), "--name", "p"]) == 0
    prev = tmp_path / "prev" / "p.json"
    shards = _shards(tmp_path, gate, key, 3, "--shard-durations", str(prev))
    plain = [json.loads(p.with_name(p.name.replace(".dsse", "")).read_text())["shard"] for p in shards]
    assert {s["assignment"] for s in plain} == {"durations"} and len({s["durations_from"] for s in plain}) == 1
    took = read_durations(prev)
    load = [sum(took[n] for n in s["items"]) for s in plain]
    assert max(load) - min(load) <= max(took.values())  # longest first on the least loaded: one item apart at most
    assert sorted(n for s in plain for n in s["items"]) == sorted(took)
    assert _merge(tmp_path, shards, pub, key, "--name", "m") == 0
    (tmp_path / "x").mkdir()
    by_id = _shards(tmp_path / "x", gate, key, 3)
    assert _merge(tmp_path, [shards[0], *by_id[1:]], pub, key, "--name", "m3") == 2  # one shard split another way
