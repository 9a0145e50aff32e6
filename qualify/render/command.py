"""`qualify render`: read, check, render and write, refusing to replace an existing file unless forced."""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from qualify.render.html import render_html
from qualify.render.markdown import render_markdown
from qualify.render.source import RenderError, SignatureState, load_input

FORMATS = ("html", "md")


@dataclass(frozen=True)
class RenderRequest:
    source: Path
    output: Path | None  # None: standard output (e.g. `>> "$GITHUB_STEP_SUMMARY"`)
    format: str
    key: Path | None
    force: bool


def infer_format(output: Path | None, explicit: str | None) -> str:
    if explicit:
        return explicit
    if output is not None and output.suffix.lower() in (".md", ".markdown"):
        return "md"
    return "html"


def write_output(path: Path, text: str, force: bool) -> None:
    """Create `path`; with `force`, replace it atomically so a reader never sees half a page."""
    data = text.encode("utf-8")
    if not force:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError as e:
            raise RenderError(f"{path}: exists already; pass --force to replace it") from e
        except OSError as e:
            raise RenderError(f"{path}: cannot create: {e.strerror or e}") from e
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent or Path("."), prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as e:
        raise RenderError(f"{path}: cannot write: {e.strerror or e}") from e


def run_render(request: RenderRequest) -> int:
    """Exit status: 0 rendered; 1 rendered, but the signature is INVALID; RenderError for usage problems."""
    src = load_input(request.source, request.key)
    text = render_html(src) if request.format == "html" else render_markdown(src)
    if request.output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_output(request.output, text, request.force)
        print(f"{request.output}: {src.report.get('verdict')}; {src.signature.label}", file=sys.stderr)
    return 1 if src.signature.state is SignatureState.INVALID else 0
