"""Render a signed (or plain) qualification report for people: a self-contained HTML page or a Markdown summary."""

from qualify.render.html import render_html
from qualify.render.markdown import render_markdown
from qualify.render.source import RenderError, RenderInput, SignatureState, SignatureStatus, load_input

__all__ = [
    "RenderError",
    "RenderInput",
    "SignatureState",
    "SignatureStatus",
    "load_input",
    "render_html",
    "render_markdown",
]
