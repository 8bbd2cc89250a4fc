"""report.html at a glance, in a real browser: Debian's headless Chromium (`scripts/browser.sh`,
which `make test` runs) opens the report of the default spec's recorded run at 1280 x 800 and the
scorecard is above the fold with a coloured badge per layer, the console has no errors (no CSP
violation, no failed load), every plot loads, and no table is wider than the text column."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from PIL import Image

from day0.report.write import write_report
from tests.fixtures.browser import Page, chromium
from tests.fixtures.report import recorded_run

WIDTH, HEIGHT = 1280, 800
BADGES = {"PASS": (26, 127, 55), "WARN": (154, 103, 0), "FAIL": (207, 34, 46)}  # report_html's colours

# Measured with the folds closed (as a reader first sees the page), then with every fold open.
_LAYOUT = """(() => {
  const card = document.querySelector('table.scorecard');
  const badges = [...card.querySelectorAll('.badge')].map(b => [b.textContent, getComputedStyle(b).backgroundColor]);
  const fold = {card_bottom: card.getBoundingClientRect().bottom, viewport: innerHeight, badges};
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  const style = getComputedStyle(document.body);
  const column = document.body.getBoundingClientRect().right - parseFloat(style.paddingRight);
  const tables = [...document.querySelectorAll('table')].map(t => ({
    head: (t.rows[0] ? t.rows[0].textContent : '').slice(0, 80), right: t.getBoundingClientRect().right,
    scroll: t.scrollWidth, client: t.clientWidth}));
  const images = [...document.images].map(i => ({alt: i.alt, loaded: i.complete && i.naturalWidth > 0,
    right: i.getBoundingClientRect().right}));
  return {...fold, column, tables, images, page_width: document.documentElement.scrollWidth, width: innerWidth};
})()"""


@pytest.fixture(scope="module")
def browser() -> str:
    binary = chromium()
    if binary is None:
        pytest.skip("no Chromium installed: run scripts/browser.sh (make test runs it) to apt-get Debian's package")
    return binary


def test_report_opens_with_the_scorecard_above_the_fold_and_no_errors(browser: str, tmp_path: Path) -> None:
    ctx, steps, wall_s = recorded_run(tmp_path)
    urls = write_report(ctx, wall_s, steps)
    html, markdown = (Path(urls[k].removeprefix("file://")) for k in ("html", "markdown"))
    with Page(browser, WIDTH, HEIGHT) as page:
        page.open(html)
        shot = page.screenshot()
        layout = page.evaluate(_LAYOUT)
        errors = list(page.errors)
    (tmp_path / "report.png").write_bytes(shot)  # kept with the test's files, to look at

    assert not errors, f"the console has errors: {errors}"
    assert layout["card_bottom"] <= layout["viewport"] == HEIGHT, (
        f"the scorecard ends at {layout['card_bottom']:.0f} px, below the first {HEIGHT} px"
    )
    words = [word for word, _ in layout["badges"]]
    assert len(words) == 4 and set(words) <= set(BADGES), f"one verdict badge per layer: {words}"
    for word, colour in layout["badges"]:
        assert colour == "rgb({}, {}, {})".format(*BADGES[word]), f"{word} badge is {colour}"

    wide = [t for t in layout["tables"] if t["right"] > layout["column"] + 1 or t["scroll"] > t["client"] + 1]
    assert not wide, f"tables wider than the {layout['column']:.0f} px column: {wide}"
    assert layout["page_width"] <= layout["width"], "the page scrolls sideways"
    links = re.findall(r"!\[[^\]]*\]\(([^)\s]+\.png)\)", markdown.read_text())
    assert links and all((markdown.parent / link).is_file() for link in links), "a linked plot is missing"
    assert len(layout["images"]) == len(links) and all(i["loaded"] for i in layout["images"]), layout["images"]
    assert all(i["right"] <= layout["column"] + 1 for i in layout["images"]), "a plot overflows the column"

    image = Image.open(io.BytesIO(shot)).convert("RGB")
    assert image.size == (WIDTH, HEIGHT)
    colours = image.getcolors(maxcolors=WIDTH * HEIGHT) or []
    assert len(colours) > 50, "the screenshot is (nearly) blank"
    shown = {word for word in words if any(rgb == BADGES[word] and n > 50 for n, rgb in colours)}
    assert shown == set(words), f"badges not drawn in the first viewport: {set(words) - shown}"
