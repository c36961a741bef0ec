"""The web view in a real browser: Debian's Chromium, headless, driven by Playwright.

Sites are opened from disk (``file://``) and over HTTP (``http.server`` on 127.0.0.1, in its
own process, stopped by its PID). Every test also checks that the page logged no error.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

# CI installs the browser and Playwright: there, a missing one is a failure, not a skip.
IN_CI = os.environ.get("CI") == "true"
pytest.importorskip("plotly")
if not IN_CI:
    pytest.importorskip("playwright.sync_api")
from helpers import FIXTURES  # noqa: E402
from playwright import sync_api as playwright_api  # noqa: E402
from test_html import (  # noqa: E402
    HOSTILE_NAME,
    HOSTILE_RUN,
    HOSTILE_TAG,
    HOSTILE_TEXT,
    image_bytes,
    manifest,
    media_series,
    scalar,
    text_series,
    write_site,
)

import tbconvert  # noqa: E402
from tbconvert.model import Experiment, Run  # noqa: E402

pytestmark = pytest.mark.slow

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    exe = chromium_path()
    if exe is None:
        (pytest.fail if IN_CI else pytest.skip)(
            "Chromium is not installed (Debian: apt-get install chromium)")
    profile = tmp_path_factory.mktemp("chromium-profile")
    with playwright_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile), executable_path=exe, args=CHROMIUM_ARGS, headless=True,
            viewport={"width": 1400, "height": 1000})
        try:
            yield context
        finally:
            context.close()


class Page:
    """A page with its console errors, uncaught exceptions and dialogs recorded."""

    def __init__(self, context, url: str) -> None:
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page = context.new_page()
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

        def dialog(d):
            self.dialogs.append(d.message)
            d.dismiss()
        self.page.on("dialog", dialog)
        self.page.goto(url)
        self.page.wait_for_selector(".card[data-state=drawn], #empty:not([hidden])", timeout=30000)

    def tab(self, kind: str) -> None:
        self.page.click(f"#tabs button[data-tab={kind}]")

    def draw_all(self, kind: str) -> list:
        """Scroll every card of ``kind`` into view and wait until each has drawn."""
        cards = self.page.query_selector_all(f"#panel-{kind} .card")
        for card in cards:
            card.scroll_into_view_if_needed()
            self.page.wait_for_function("c => c.dataset.state === 'drawn'", arg=card, timeout=20000)
        return cards

    def close(self) -> None:
        self.page.close()


@pytest.fixture(scope="module")
def torch_site(tmp_path_factory):
    site = tmp_path_factory.mktemp("html-browser") / "site"
    tbconvert.convert(FIXTURES / "torch_logdir", site, to_format="html")
    return site


@contextlib.contextmanager
def served(directory):
    """``directory`` over HTTP on 127.0.0.1; the server is stopped by its PID."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                             "--directory", str(directory)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                break
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("http.server did not start")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/"
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def check_fixture_site(page: Page, site) -> None:
    m = manifest(site)
    cards = page.draw_all("scalars")
    # One chart per scalar tag, each with every point of every run behind it.
    by_tag = {c.get_attribute("data-tag"): c for c in cards}
    assert len(cards) == len(by_tag) and set(by_tag) == {g["tag"] for g in m["scalars"]}
    for group in m["scalars"]:
        card = by_tag[group["tag"]]
        assert int(card.get_attribute("data-points")) == sum(s["n"] for s in group["series"])
        assert card.query_selector(".main-svg") is not None
    # The loss chart: train, resumed and resumed_purged overlaid (140 points, hidden ones out).
    loss = next(c for c in cards if c.get_attribute("data-tag") == "loss")
    assert int(loss.get_attribute("data-points")) == 50 + 50 + 40
    assert page.page.evaluate(
        "c => c.querySelector('.chart').data.filter(t => t.hoverinfo !== 'skip').length", loss) == 3

    page.tab("images")
    page.draw_all("images")
    sizes = page.page.evaluate(
        "() => Promise.all(Array.from(document.querySelectorAll('#panel-images img')).map("
        "i => i.decode().then(() => [i.naturalWidth, i.naturalHeight])))")
    assert len(sizes) == 2 and all(w > 0 and h > 0 for w, h in sizes)
    assert [16, 16] in sizes

    page.tab("hparams")
    rows = page.page.query_selector_all("table.hparams tbody tr")
    assert [r.query_selector("td").text_content() for r in rows] == [r[0] for r in m["hparams"]["rows"]]
    assert page.errors == [], page.errors


def test_fixture_site_from_disk(browser, torch_site):
    page = Page(browser, (torch_site / "index.html").as_uri())
    try:
        check_fixture_site(page, torch_site)
        for kind in ("histograms", "distributions", "audio", "text"):
            page.tab(kind)
            assert page.draw_all(kind), kind
        assert page.page.query_selector("#panel-audio audio") is not None
        assert page.page.query_selector("#panel-text .text-view p, #panel-text .text-view table")
        assert page.errors == [], page.errors
    finally:
        page.close()


def test_fixture_site_over_http(browser, torch_site):
    import urllib.request
    with served(torch_site) as url:
        page = Page(browser, url)
        try:
            check_fixture_site(page, torch_site)
        finally:
            page.close()
        # Media carry their real type's name, so a static host serves them with that type.
        types = {"png": "image/png", "gif": "image/gif", "jpg": "image/jpeg", "wav": "audio/"}
        media = sorted((torch_site / "media").iterdir())
        assert media
        for path in media:
            with urllib.request.urlopen(url + "media/" + path.name, timeout=10) as resp:
                assert resp.headers["Content-Type"].startswith(types[path.suffix[1:]])


def test_hparams_rows_sort(browser, tmp_path):
    tbconvert.convert(FIXTURES / "tf2_logdir", tmp_path / "site", to_format="html")
    page = Page(browser, (tmp_path / "site" / "index.html").as_uri())
    try:
        page.tab("hparams")
        first = "table.hparams tbody tr:first-child td:first-child"
        assert page.page.text_content(first) == "hparams/trial_0"
        header = page.page.query_selector("table.hparams th")
        header.click()
        header.click()
        assert header.get_attribute("aria-sort") == "descending"
        assert page.page.text_content(first) == "hparams/trial_1"
        assert len(page.page.query_selector_all("table.hparams tbody tr")) == 2
        assert page.errors == [], page.errors
    finally:
        page.close()


def test_hostile_names_are_shown_as_text(browser, tmp_path):
    site = tmp_path / "site"
    write_site(site, [(Run(HOSTILE_RUN, 1.7e9), [
        scalar(HOSTILE_RUN, HOSTILE_TAG, [0, 1, 2], [1.0, 2.0, 3.0]),
        text_series(HOSTILE_RUN, HOSTILE_TAG, [HOSTILE_TEXT]),
        media_series(HOSTILE_RUN, HOSTILE_TAG, "images", [[b"4", b"3", image_bytes("PNG")]]),
    ])], Experiment(name=HOSTILE_NAME, description=HOSTILE_TEXT))
    page = Page(browser, (site / "index.html").as_uri())
    try:
        p = page.page
        assert p.text_content("#exp-name") == HOSTILE_NAME
        assert p.title() == HOSTILE_NAME
        assert p.text_content("#runs label") == HOSTILE_RUN
        (card,) = page.draw_all("scalars")
        assert card.query_selector("h3").text_content() == HOSTILE_TAG
        assert card.query_selector(".downloads a").text_content() == HOSTILE_RUN
        # Plotly shows the run name (hover) as text too: its escaped form, not markup.
        assert p.evaluate("c => c.querySelector('.chart').data[1].name", card).startswith("&lt;img")
        page.tab("text")
        page.draw_all("text")
        view = p.query_selector("#panel-text .text-view")
        assert view.query_selector("h1").text_content() == "Title"
        assert view.query_selector_all("script, img, iframe") == []
        assert "<script>window.__pwned=4</script>" in view.text_content()
        page.tab("images")
        (card,) = page.draw_all("images")
        assert card.query_selector("h3").text_content() == HOSTILE_TAG
        assert card.query_selector(".sub").text_content() == HOSTILE_RUN
        assert card.query_selector("img").get_attribute("src").startswith("media/")
        # Nothing ran: no payload set its mark, no dialog opened, no inline script was blocked.
        assert p.evaluate("() => window.__pwned") is None
        assert p.query_selector_all("body script:not([src])") == []
        assert page.dialogs == []
        assert page.errors == [], page.errors
    finally:
        page.close()


def test_big_series_is_downsampled_for_display_and_zoom_shows_real_points(browser, tmp_path):
    n = 200_000
    steps = np.arange(n, dtype=np.int64) * 2
    values = np.sin(np.arange(n) / 500.0).astype(np.float32)
    values[123_457] = 50.0      # one spike among many points: must survive the downsampling
    site = tmp_path / "site"
    write_site(site, [(Run("big", 1.7e9), [scalar("big", "wave", steps, values)])])
    page = Page(browser, (site / "index.html").as_uri())
    try:
        p = page.page
        (card,) = page.draw_all("scalars")
        assert int(card.get_attribute("data-points")) == n
        assert int(card.get_attribute("data-drawn")) <= 4000
        trace = "c => Array.from(c.querySelector('.chart').data[0].%s)"
        assert 50.0 in p.evaluate(trace % "y", card)
        # Zoom to steps 1000..1400: every real point in the range is drawn, with its value.
        p.evaluate("c => Plotly.relayout(c.querySelector('.chart'), {'xaxis.range': [1000, 1400]})",
                   card)
        p.wait_for_function("c => Number(c.dataset.drawn) < 1000", arg=card, timeout=20000)
        xs = p.evaluate(trace % "x", card)
        ys = p.evaluate(trace % "y", card)
        assert set(range(1000, 1401, 2)) <= set(xs)
        for x, y in zip(xs, ys, strict=True):
            assert np.float32(y) == values[x // 2]
        # Double click (autorange) goes back to the whole series.
        p.evaluate("c => Plotly.relayout(c.querySelector('.chart'), {'xaxis.autorange': true})", card)
        p.wait_for_function("c => Number(c.dataset.drawn) > 1000", arg=card, timeout=20000)
        assert page.errors == [], page.errors
    finally:
        page.close()


def test_controls_redraw_the_charts(browser, tmp_path):
    site = tmp_path / "site"
    runs = []
    for r, name in enumerate(("train", "eval")):
        wall = 1.7e9 + 60.0 * np.arange(10) + 3600 * r
        runs.append((Run(name, float(wall[0])), [
            scalar(name, "loss", np.arange(10), np.linspace(1, 0.1, 10) + r, wall=wall),
            scalar(name, "acc", np.arange(10), np.linspace(0.1, 1, 10), wall=wall)]))
    write_site(site, runs)
    page = Page(browser, (site / "index.html").as_uri())
    try:
        p = page.page
        page.draw_all("scalars")
        chart = "document.querySelector('#panel-scalars .card[data-tag=\"{}\"] .chart')"
        loss = chart.format("loss")

        def settled():
            p.wait_for_function("() => Array.from(document.querySelectorAll('#panel-scalars .card'))"
                                ".every(c => c.hidden || c.dataset.state === 'drawn')")
            p.wait_for_timeout(300)
            return p.evaluate(f"() => {loss}.data")

        def shown(data):
            return [t for t in data if t.get("hoverinfo") != "skip"]

        assert len(shown(settled())) == 2
        p.uncheck("#run-1")
        assert len(shown(settled())) == 1
        p.check("#run-1")
        p.fill("#run-filter", "^ev")
        data = settled()
        assert len(shown(data)) == 1 and p.is_hidden("#runs li[data-run='0']")
        p.fill("#run-filter", "")
        p.fill("#tag-filter", "^acc$")
        assert p.is_hidden("#panel-scalars .card[data-tag='loss']")
        p.fill("#tag-filter", "")
        # Smoothing off: the raw values only, as drawn lines with hover.
        p.evaluate("() => { const s = document.getElementById('smoothing'); s.value = 0;"
                   " s.dispatchEvent(new Event('input')); }")
        data = settled()
        assert len(data) == 2 and all(t.get("hoverinfo") != "skip" for t in data)
        assert [round(v, 6) for v in data[0]["y"]] == [round(v, 6) for v in np.linspace(1, 0.1, 10)]
        p.check("input[name=xaxis][value=relative]")
        data = settled()
        assert data[0]["x"][0] == 0 and abs(data[0]["x"][-1] - 9 * 60 / 3600) < 1e-9
        p.check("input[name=xaxis][value=wall]")
        data = settled()
        assert p.evaluate(f"() => {loss}.layout.xaxis.type") == "date"
        assert data[0]["x"][0] == 1.7e12
        # Zoom on the date axis: the range is read back in milliseconds.
        p.evaluate(f"() => Plotly.relayout({loss}, {{'xaxis.range': ["
                   "new Date(1.7e12 + 120e3).toISOString(), new Date(1.7e12 + 300e3).toISOString()]})")
        p.wait_for_function(f"() => {loss}.data[0].x.length < 10")
        xs = p.evaluate(f"() => {loss}.data[0].x")
        assert 1.7e12 + 120e3 <= min(xs[1:-1]) and max(xs[1:-1]) <= 1.7e12 + 300e3
        p.check("#log-scale")
        settled()
        assert p.evaluate(f"() => {loss}.layout.yaxis.type") == "log"
        assert page.errors == [], page.errors
    finally:
        page.close()
