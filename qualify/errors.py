"""One error base for everything the suite reports to a person.

pytest renders only these types with our own failure format; anything else keeps its traceback.
"""

from __future__ import annotations

from dataclasses import dataclass


class QualifyError(Exception):
    """Base of every error the suite raises on purpose."""

    def diagnostics(self) -> str:
        return str(self)


@dataclass(frozen=True)
class SourceLocation:
    file: str
    line: int  # 1-based
    col: int  # 1-based

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class GateFileError(QualifyError):
    """A gate file is malformed; carries `file:line:col` and, when known, the offending source line."""

    def __init__(self, message: str, location: SourceLocation | None = None, snippet: str | None = None):
        self.message = message
        self.location = location
        self.snippet = snippet
        super().__init__(self.diagnostics())

    def diagnostics(self) -> str:
        head = f"{self.location}: {self.message}" if self.location else self.message
        if self.snippet:
            return f"{head}\n    {self.snippet.rstrip()}"
        return head


class CartridgeError(QualifyError):
    """A cartridge file is missing, corrupt or does not fit the model. The message names the file."""

    def __init__(self, path: str, problem: str):
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class DataError(QualifyError):
    """An eval-data file or dataset is missing or malformed. The message names the file."""

    def __init__(self, path: str, problem: str):
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class InsensitiveMeasurementError(QualifyError):
    """A positive control did not show the damage it must show, so the measurement proves nothing.

    Carries the runner's outcome (an `ItemOutcome`) so the report still shows every number measured.
    """

    def __init__(self, message: str, outcome: object | None = None):
        self.outcome = outcome
        super().__init__(message)


class SigningError(QualifyError):
    """Signing or verifying a report failed; the message says which part did not match."""
