"""Secrets must not reach a report: through `${VAR}` in a gate file, the environment or the signing config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _hostile import assert_clean_error, qualify, snapshot

from qualify.cli import main
from qualify.report.provenance import filter_environment, redact_argv

SECRET = "hunter2-s3cr3t-value"
GATE = "suite: hostile\nversion: 1\n{variables}gates:\n  - {{id: g, kind: compare, value: 0.5, limit: 1.0, {field}}}\n"


def gate(tmp_path: Path, field: str, variables: str = "") -> Path:
    path = tmp_path / "g.yaml"
    path.write_text(GATE.format(variables=variables, field=field))
    return path


@pytest.mark.parametrize(
    ("variables", "field", "env", "expected"),
    [
        # Declared, but named like a secret: refused at the declaration, used or not.
        (
            "variables: [HOME_DIR, GITHUB_TOKEN]\n",
            'file: "${HOME_DIR}"',
            {"GITHUB_TOKEN": SECRET, "HOME_DIR": "/tmp"},
            r"^g\.yaml:3:23: variable GITHUB_TOKEN is refused because its name looks like a secret "
            r"\(contains 'TOKEN'\)",
        ),
        # Allowed by QUALIFY_VARS from the runner's side: still refused where it is used.
        (
            "",
            'description: "token ${DB_PASS}", file: x',
            {"DB_PASS": SECRET, "QUALIFY_VARS": "DB_PASS"},
            r"^g\.yaml:4:52: \$\{DB_PASS\}: variable DB_PASS is refused because its name looks like a secret",
        ),
        # Any case, any position: the marker is a substring.
        (
            "variables: [my_auth_header]\n",
            'file: "${my_auth_header}"',
            {"my_auth_header": SECRET},
            r"^g\.yaml:3:13: variable my_auth_header is refused .*contains 'AUTH'",
        ),
        # Not declared at all: refused, and the message says how to allow it.
        (
            "",
            'file: "${DATA_DIR}/x"',
            {"DATA_DIR": SECRET},
            r"^g\.yaml:4:52: \$\{DATA_DIR\}: variable DATA_DIR is not allowed; declare it in the gate file "
            r"\(variables: \[DATA_DIR\]\) or set QUALIFY_VARS=DATA_DIR$",
        ),
        # A default does not make an undeclared variable acceptable: it would silently ignore the environment.
        ("", 'file: "${DATA_DIR:-x}"', {}, r"variable DATA_DIR is not allowed"),
    ],
)
def test_variables_cannot_reach_secrets(
    tmp_path: Path, variables: str, field: str, env: dict[str, str], expected: str
) -> None:
    gate(tmp_path, field, variables)
    before = snapshot(tmp_path)
    outcome = qualify(["lint", "g.yaml"], tmp_path, env=env)
    assert_clean_error(outcome, 2, expected)
    assert SECRET not in outcome.output
    assert snapshot(tmp_path) == before


def test_declared_and_env_allowed_variables_expand(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.bin").write_bytes(b"x")
    gate(tmp_path, 'file: "${DATA_DIR}/${NAME}"', "variables: [DATA_DIR]\n")
    outcome = qualify(["list", "g.yaml"], tmp_path, env={"DATA_DIR": "data", "NAME": "x.bin", "QUALIFY_VARS": "NAME"})
    assert outcome.code == 0, outcome.output


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    assert main(["keygen", "--out", str(tmp_path / "keys")]) == 0
    return tmp_path / "keys" / "signing-key.pem", tmp_path / "keys" / "signing-key.pub.pem"


def test_signed_report_holds_no_secret_environment_or_key_material(
    tmp_path: Path, keys: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    private, _ = keys
    (tmp_path / "input.bin").write_bytes(b"x")
    gate(tmp_path, f"file: {tmp_path / 'input.bin'}")
    key_body = [line for line in private.read_text().splitlines() if "-----" not in line]
    hostile_env = {
        "QUALIFY_SIGNING_KEY": str(private),
        "QUALIFY_DB_PASS": SECRET,
        "QUALIFY_AUTH": SECRET,
        "QUALIFY_SESSION_COOKIE": SECRET,
        "QUALIFY_CREDS": SECRET,
        "QUALIFY_PRIVATE_URL": SECRET,
        "QUALIFY_KEYFILE": SECRET,
        "QUALIFY_KEY_COPY": str(private),
        "QUALIFY_SIGNER": str(private),  # a harmless name holding the key path
        "QUALIFY_PEM": private.read_text(),  # a harmless name holding the key itself
        "QUALIFY_BODY": key_body[0],
        "QUALIFY_RUNNER_POOL": "h200-a",  # must survive: the filter is not "drop everything"
    }
    for name, value in hostile_env.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "g.yaml"), "--out", str(out), "--name", "r"]) == 0
    report_text = (out / "r.json").read_text()
    envelope_text = (out / "r.dsse.json").read_text()
    environment = json.loads(report_text)["provenance"]["environment"]
    assert environment.get("QUALIFY_RUNNER_POOL") == "h200-a"
    assert not set(environment) & (set(hostile_env) - {"QUALIFY_RUNNER_POOL"}), environment
    for text in (report_text, envelope_text):
        assert SECRET not in text
        assert str(private) not in text
        assert not any(line in text for line in key_body)


def test_provenance_filters_every_secret_marker() -> None:
    names = ["QUALIFY_X_KEY", "QUALIFY_SECRET", "QUALIFY_TOKEN", "QUALIFY_PASS", "QUALIFY_AUTH", "QUALIFY_CRED"]
    names += ["QUALIFY_COOKIE", "QUALIFY_SESSION", "QUALIFY_PRIVATE", "qualify_lower_pass"]
    names += ["QUALIFY_MYSQL_PWD", "QUALIFY_SENTRY_DSN", "QUALIFY_CI_JOB_JWT", "QUALIFY_SLACK_WEBHOOK_URL"]
    env = dict.fromkeys(names, "v") | {"QUALIFY_SUITE": "v"}
    assert filter_environment(env) == {"QUALIFY_SUITE": "v"}
    assert redact_argv(["qualify", "--db-pass", "p", "--session=s", "-k", "x"]) == [
        "qualify", "--db-pass", "<redacted>", "--session=<redacted>", "-k", "x",
    ]  # fmt: skip
