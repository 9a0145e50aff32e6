"""The sign-off page in a real browser (Debian's headless Chromium): loads cleanly, fetches nothing, is not blank."""

from __future__ import annotations

from pathlib import Path

import pytest
from _chromium_cdp import PageResult, find_chromium, load_page
from _png_decode import decode, ink_fraction
from _render_signed import Signed

from qualify.render.html import render_html
from qualify.render.source import load_input

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run installs it)"
)
# Screenshots are decoded in pure Python, so they are taken at reduced scale.
SCALE = 0.25
SECTIONS = ("verdict", "signature", "gates", "plots", "plot-loss", "plot-accuracy", "plot-perf", "plot-numerics",
            "payload", "provenance")  # fmt: skip


def _open(page: Path, tmp_path: Path) -> PageResult:
    assert CHROMIUM is not None
    return load_page(CHROMIUM, page, tmp_path / "profile", SCALE)


def test_signoff_page_loads_without_errors_and_renders(signed: Signed, tmp_path: Path) -> None:
    page = tmp_path / "signoff.html"
    page.write_text(render_html(load_input(signed.envelope, signed.public_key)))
    result = _open(page, tmp_path)
    assert result.errors == []
    assert result.requests == [page.resolve().as_uri()]  # the page itself and nothing else
    assert set(SECTIONS) <= set(result.element_ids)
    image = decode(result.screenshot)
    assert image.height > image.width  # the full page, not just the first screen
    assert ink_fraction(image) > 0.05


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """The same probes see a script error, a console error, an outside request and a blank page."""
    # The outside request goes to the loopback discard port: nothing leaves the machine.
    broken = tmp_path / "broken.html"
    broken.write_text(
        "<!DOCTYPE html><body><script>console.error('boom'); throw new Error('kaput')</script>"
        "<img src='http://127.0.0.1:9/x.png'></body>"
    )
    result = _open(broken, tmp_path)
    assert any("boom" in e for e in result.errors) and any("kaput" in e for e in result.errors)
    assert "http://127.0.0.1:9/x.png" in result.requests
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><body></body>")
    assert ink_fraction(decode(_open(blank, tmp_path / "b").screenshot)) == 0.0


@pytest.mark.skipif(
    "QUALIFY_SIGNOFF_PAGE" not in __import__("os").environ,
    reason="set QUALIFY_SIGNOFF_PAGE to a page rendered from a real run (nox -s signoff does)",
)
def test_a_page_rendered_from_a_real_run_loads_with_every_section(tmp_path: Path) -> None:
    import os

    page = Path(os.environ["QUALIFY_SIGNOFF_PAGE"]).resolve()
    result = _open(page, tmp_path)
    assert result.errors == []
    assert result.requests == [page.as_uri()]
    assert set(SECTIONS) <= set(result.element_ids), set(SECTIONS) - set(result.element_ids)
    assert ink_fraction(decode(result.screenshot)) > 0.05
