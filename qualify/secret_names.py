"""Which names may hold a credential: one rule shared by gate-file variables, provenance and argv redaction.

Deliberately broad (a substring, any case): a false positive costs a variable or an environment entry
in the report, a false negative puts a token into a signed report that is attached to a public release.
"""

from __future__ import annotations

SECRET_MARKERS = (
    "KEY",
    "SECRET",
    "TOKEN",
    "PASS",
    "PWD",
    "AUTH",
    "CRED",
    "COOKIE",
    "SESSION",
    "PRIVATE",
    "JWT",
    "DSN",
    "WEBHOOK",
)  # fmt: skip  (MYSQL_PWD, SENTRY_DSN, CI_JOB_JWT, SLACK_WEBHOOK_URL carry credentials too)


def secret_marker(name: str) -> str | None:
    """The first marker that `name` contains (case-insensitive), or None if it does not look secret."""
    upper = name.upper()
    return next((marker for marker in SECRET_MARKERS if marker in upper), None)


def is_secret_name(name: str) -> bool:
    """Whether `name` (an environment variable or option name) looks like it holds a secret."""
    return secret_marker(name) is not None
