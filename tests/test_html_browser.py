"""The web view in a real browser: Debian's Chromium, headless, driven by Playwright.

Sites are opened from disk (``file://``) and over HTTP (``http.server`` on 127.0.0.1, in its
own process, stopped by its PID). Every test also checks that the page logged no error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
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
    data_file,
    image_bytes,
    manifest,
    media_series,
    scalar,
    text_series,
    wav_bytes,
    write_site,
)

import tbconvert  # noqa: E402
from tbconvert.model import DataClass, Experiment, Metadata, Run, TensorSeries  # noqa: E402

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
    # no chart offers to upload itself (its data, run names included) to Plotly's cloud
    loss.hover()
    cloud, buttons, share = page.page.evaluate(
        "c => { const p = c.querySelector('.chart'); return [p._context.showSendToCloud, "
        "p.querySelectorAll('.modebar-btn').length, "
        "p.querySelectorAll('[data-title*=\"Share\"], [data-title*=\"Chart Studio\"]')"
        ".length] }", loss)
    assert (cloud, share) == (False, 0) and buttons > 0

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


@pytest.fixture(scope="module")
def tf2_site(tmp_path_factory):
    site = tmp_path_factory.mktemp("html-browser") / "site"
    tbconvert.convert(FIXTURES / "tf2_logdir", site, to_format="html")
    return site


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


def test_hparams_rows_sort(browser, tf2_site):
    page = Page(browser, (tf2_site / "index.html").as_uri())
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
        # ...and what the hover label shows is the name itself (entities Plotly decodes)
        label = p.evaluate("c => { const g = c.querySelector('.chart');"
                           " Plotly.Fx.hover(g, [{curveNumber: 1, pointNumber: 0}]);"
                           " return g.querySelector('.hoverlayer').textContent; }", card)
        assert HOSTILE_RUN in label, label
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


def hparams_start(run: str, start_time: float, **more: float) -> TensorSeries:
    """The session start of a trial (lr 0.1, and ``more`` hparams) that began at
    ``start_time``."""
    from tensorboard.plugins.hparams import plugin_data_pb2
    data = plugin_data_pb2.HParamsPluginData(version=0)
    data.session_start_info.hparams["lr"].number_value = 0.1
    for name, value in more.items():
        data.session_start_info.hparams[name].number_value = value
    data.session_start_info.start_time_secs = start_time
    md = Metadata("hparams", data.SerializeToString(), "", "", DataClass.TENSOR)
    return TensorSeries(run=run, tag="_hparams_/session_start_info", metadata=md,
                        steps=np.array([0]), wall_times=np.array([1.7e9]), hidden=None,
                        dtypes=np.array([1]), tensors=(np.zeros(0, np.float32),))


def hparams_rows(page: Page) -> list:
    """Each row of the hparams table: whether it is hidden, then the text of its cells."""
    return page.page.evaluate(
        "() => Array.from(document.querySelectorAll('table.hparams tbody tr'))"
        ".map(r => [r.hidden].concat(Array.from(r.children).map(c => c.textContent)))")


# Names the page once used as keys of plain objects, where they found Object.prototype's own
# members ('__proto__' is Object.prototype itself; the others are functions).
OBJECT_MEMBERS = ("__proto__", "constructor", "toString", "hasOwnProperty")


def test_tags_and_runs_named_like_object_members(browser, tmp_path):
    site = tmp_path / "site"
    runs = []
    for name in (*OBJECT_MEMBERS, "ok"):
        series = [scalar(name, "loss", [0, 1, 2], [3.0, 2.0, 1.0])]
        series += [scalar(name, f"{group}/x", [0, 1], [1.0, 2.0]) for group in OBJECT_MEMBERS]
        series += [scalar(name, "valueOf", [0, 1], [1.0, 2.0]),
                   text_series(name, "constructor/notes", ["a *note*"]),
                   hparams_start(name, 1.7e9)]
        runs.append((Run(name, 1.7e9), series))
    write_site(site, runs)
    page = Page(browser, (site / "index.html").as_uri())
    try:
        p = page.page
        cards = page.draw_all("scalars")
        assert sorted(c.get_attribute("data-tag") for c in cards) == sorted(
            ["loss", "valueOf", *(f"{g}/x" for g in OBJECT_MEMBERS)])
        # One section per group, each holding its own charts, with every run in them.
        sections = p.evaluate(
            "() => Array.from(document.querySelectorAll('#panel-scalars details.tag-group'))"
            ".map(d => [d.querySelector('summary').textContent,"
            " Array.from(d.querySelectorAll('.card')).map(c => c.dataset.tag)])")
        assert sorted(sections) == sorted([["(no group)", ["loss", "valueOf"]],
                                           *([g, [f"{g}/x"]] for g in OBJECT_MEMBERS)])
        for card in cards:
            assert int(card.get_attribute("data-points")) == 5 * (3 if card.get_attribute(
                "data-tag") == "loss" else 2)
        page.tab("text")
        assert len(page.draw_all("text")) == 5
        assert p.text_content("#panel-text summary") == "constructor"
        # Every trial has its row, shown while its run is selected and hidden when it is not.
        page.tab("hparams")
        assert [r[:3] + r[-3:] for r in hparams_rows(page)] == [
            [False, name, "0.1", "unknown", "2023-11-14 22:13:20.000 UTC", ""]
            for name in (*OBJECT_MEMBERS, "ok")]
        p.uncheck("#run-0")
        p.wait_for_function("() => document.querySelector('table.hparams tbody tr').hidden")
        assert [r[0] for r in hparams_rows(page)] == [True, False, False, False, False]
        assert page.errors == [], page.errors
    finally:
        page.close()


def test_a_card_that_cannot_be_built_leaves_the_others(browser, tmp_path):
    site = tmp_path / "site"
    write_site(site, [(Run("r", 1.7e9), [scalar("r", "a", [0, 1], [1.0, 2.0]),
                                         scalar("r", "b", [0, 1], [3.0, 4.0]),
                                         text_series("r", "t", ["x"])]),
                      (Run("q", 1.7e9), [scalar("q", "a", [0, 1], [5.0, 6.0])])])
    # A site whose manifest names a run it does not list (cut short, or edited by hand).
    path = site / "data" / "manifest.js"
    text = path.read_text("ascii")
    assert '"run":1,"key":"s4"' in text
    path.write_text(text.replace('"run":1,"key":"s4"', '"run":7,"key":"s4"'), "ascii")
    page = Page(browser, (site / "index.html").as_uri())
    try:
        p = page.page
        broken = p.wait_for_selector("#panel-scalars .card[data-tag='a'] .error")
        assert "undefined" in broken.text_content()
        card = p.wait_for_selector("#panel-scalars .card[data-tag='b'][data-state=drawn]")
        assert card.query_selector(".main-svg")
        page.tab("text")
        assert page.draw_all("text")
        assert page.errors == [], page.errors
    finally:
        page.close()


def test_times_a_date_cannot_hold_are_shown_as_given(browser, tmp_path):
    # A Date holds 8.64e15 ms either side of 1970: times past that, and NaN or infinite ones
    # (which the data files carry as "nan", "inf", "-inf"), are shown as they are.
    wall = np.array([1.7e9, 1e300, np.nan, np.inf, -1e300, -8.64e12, 8.64e12 + 1])
    shown = ["2023-11-14 22:13:20.000 UTC", "1e+300", "nan", "inf", "-1e+300",
             "-271821-04-20 00:00:00.000 UTC", "8640000000001"]
    n = len(wall)
    steps = np.arange(n)
    site = tmp_path / "site"
    png = image_bytes("PNG")
    write_site(site, [
        (Run("r", 1.7e9), [
            scalar("r", "loss", steps, np.linspace(1, 0, n), wall=wall),
            dataclasses.replace(text_series("r", "notes", [f"note {i}" for i in range(n)]),
                                wall_times=wall),
            dataclasses.replace(media_series("r", "img", "images", [[b"4", b"3", png]] * n),
                                wall_times=wall),
            dataclasses.replace(media_series("r", "snd", "audio", [[wav_bytes()]] * n),
                                wall_times=wall)]),
        *((Run(f"trial{i}", 1.7e9), [hparams_start(f"trial{i}", t)])
          for i, t in enumerate((1.7e9, 1e300, -1e300, np.nan)))])
    page = Page(browser, (site / "index.html").as_uri())
    try:
        p = page.page
        for kind in ("text", "images", "audio"):
            page.tab(kind)
            (card,) = page.draw_all(kind)
            labels = []
            for i in range(n):
                card.query_selector("input[type=range]").fill(str(i))
                labels.append(card.query_selector(".step-label").text_content())
                assert card.query_selector(".text-view p, img, audio"), (kind, i)
            assert labels == [f"step {i} · {t}" for i, t in enumerate(shown)], kind
        page.tab("hparams")
        assert [r[1:] for r in hparams_rows(page)] == [
            [f"trial{i}", "0.1", "unknown", t, ""]
            for i, t in enumerate(("2023-11-14 22:13:20.000 UTC", "1e+300", "-1e+300", "nan"))]
        # The scalar chart draws on every axis (Plotly leaves out what it cannot place).
        page.tab("scalars")
        for axis in ("relative", "wall", "step"):
            p.check(f"input[name=xaxis][value={axis}]")
            p.wait_for_function("() => document.querySelector('#panel-scalars .card')"
                                ".dataset.state === 'drawn'")
        assert p.query_selector_all(".card .error") == []
        assert page.errors == [], page.errors
    finally:
        page.close()


def tensorboard_bands(buckets) -> list[float]:
    from tensorboard.plugins.distribution import compressor
    with np.errstate(all="ignore"):     # NaN and infinite counts are among the cases
        return [v for _bp, v in compressor.compress_histogram(buckets)]


def same_bands(got, want) -> bool:
    return len(got) == len(want) == 9 and all(
        (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-300)
        for a, b in zip(got, want, strict=True))


def site_histograms(site) -> list:
    """Every histogram of a site, as (card's run, tag, step index, its [left, right, count] rows)."""
    out = []
    for group in manifest(site)["histograms"]:
        for s in group["series"]:
            _, cols = data_file(site, s["key"])
            for i in range(len(cols["step"])):
                a, b = int(cols["offsets"][i]), int(cols["offsets"][i + 1])
                out.append((s["run"], group["tag"], i, cols["buckets"][3 * a:3 * b].reshape(-1, 3)))
    return out


# Hand-made histograms: where the bands fall into or next to empty buckets, the ends, no
# buckets or no weight at all, odd counts. In the first, every value in [-1, 1] is a median;
# TensorBoard takes the right edge of the empty bucket. In the second, a running sum of the
# counts (not numpy's pairwise one) puts TensorBoard's median of 11 at 5.
HAND_MADE = [
    [[-2, -1.5, 1], [-1.5, -1, 1], [-1, 1, 0], [1, 1.5, 1], [1.5, 2, 1]],
    [[0, 1, 0.2], [1, 2, 0.05], [2, 3, 2.2], [3, 4, 0.1], [4, 5, 1.1], [5, 11, 0],
     [11, 12, 0.35], [12, 13, 1.1], [13, 14, 2.2]],
    [], [[0, 1, 0]], [[0, 1, 0], [1, 2, 0], [2, 3, 0]], [[3, 3, 7]], [[-1, 2, 1]],
    [[0, 1, 0], [1, 2, 5], [2, 3, 0]], [[0, 1, 5], [1, 2, 0], [2, 3, 0]],
    [[0, 1, 0], [1, 2, 0], [2, 3, 4]], [[0, 1, 1], [1, 2, 1]], [[0, 1, 1], [5, 6, 1]],
    [[0, 1, 2], [1, 2, -1], [2, 3, 3]], [[0, 1, np.nan], [1, 2, 1]], [[0, 1, 1], [1, 2, np.inf]],
    [[0, 1, 1e-300], [1, 2, 1e-300]], [[0, 1, 1e300], [1, 2, 1e300]],
    [[-np.inf, 0, 1], [0, 1, 2], [1, np.inf, 1]], [[2, 1, 1], [1, 0, 1]],
]


def random_histograms(rng, count: int) -> list:
    out = []
    for k in range(count):
        # Sizes past 8 and 128 buckets too: numpy sums those pairwise, in blocks.
        n = int(rng.integers(1, 40)) if k % 10 else int(rng.integers(120, 600))
        edges = np.sort(rng.normal(size=n + 1)) * 10.0 ** rng.integers(-3, 4)
        counts = [rng.integers(0, 5, n).astype(float),                     # integer counts
                  rng.random(n) * 10.0 ** rng.integers(-3, 6),             # weighted
                  (rng.random(n) < 0.2) * rng.integers(1, 4, n) * 1.0,     # mostly empty
                  rng.choice([0, 0.05, 0.1, 0.2, 0.3, 0.35, 0.7, 1.1, 2.2], n)][k % 4]
        out.append(np.column_stack([edges[:-1], edges[1:], counts]).tolist())
    return out


def as_json(histograms) -> str:
    """Histograms as one JSON text (non-finite numbers as strings): handing Playwright
    hundreds of thousands of numbers one by one takes far longer than the test itself."""
    return json.dumps([[v if math.isfinite(v) else repr(v) for row in h for v in row]
                       for h in histograms])


COMPRESS_ALL = """text => JSON.parse(text, (k, v) => typeof v === 'string'
    ? Number(v.replace('inf', 'Infinity').replace('nan', 'NaN')) : v)
  .map(flat => Array.from(TB.compressHistogram(flat)))"""


def test_distribution_bands_are_tensorboards(browser, torch_site, tf2_site):
    page = Page(browser, (torch_site / "index.html").as_uri())
    try:
        p = page.page
        # The drawn bands of the fixture's histograms: the band of each basis point, per step.
        page.tab("distributions")
        cards = page.draw_all("distributions")
        hists = site_histograms(torch_site)
        assert len(cards) == len({(r, t) for r, t, _i, _b in hists}) > 0
        for card in cards:
            run, tag = int(card.get_attribute("data-run")), card.get_attribute("data-tag")
            drawn = p.evaluate("c => c.querySelector('.chart').data.map(t => Array.from(t.y))",
                               card)
            for r, t, i, buckets in hists:
                if (r, t) == (run, tag):
                    assert same_bands([band[i] for band in drawn], tensorboard_bands(buckets)), \
                        (tag, i)
        # The page's function itself, on both fixtures' histograms, hand-made and random ones.
        cases = ([b.tolist() for _r, _t, _i, b in hists + site_histograms(tf2_site)] + HAND_MADE
                 + random_histograms(np.random.default_rng(20240611), 1000))
        got = p.evaluate(COMPRESS_ALL, as_json(cases))
        bad = [(h, g, tensorboard_bands(h)) for h, g in zip(cases, got, strict=True)
               if not same_bands(g, tensorboard_bands(h))]
        assert bad == [], bad[:3]
        median = {tuple(map(tuple, h)): g[4] for h, g in zip(cases, got, strict=True) if h}
        assert median[tuple(map(tuple, HAND_MADE[0]))] == 1.0
        assert median[tuple(map(tuple, HAND_MADE[1]))] == 11.0
        assert page.errors == [], page.errors
    finally:
        page.close()


def test_an_hparam_named_like_a_time_is_shown_as_its_number(browser, tmp_path):
    site = tmp_path / "site"
    write_site(site, [(Run("trial", 1.7e9), [scalar("trial", "loss", [0, 1], [2.0, 1.0]),
                                             hparams_start("trial", 1.7e9, warmup_time=5.0)])])
    page = Page(browser, (site / "index.html").as_uri())
    try:
        page.tab("hparams")
        assert hparams_rows(page) == [
            [False, "trial", "0.1", "5", "1", "unknown", "2023-11-14 22:13:20.000 UTC", ""]]
        assert page.errors == [], page.errors
    finally:
        page.close()


def test_histograms_are_drawn_in_even_bins_as_tensorboard_draws_them(browser, torch_site,
                                                                      tmp_path):
    """Each step's buckets shared out over 30 bins of one width: every count kept, none of
    the comb that buckets of very different widths draw; a constant tensor is a spike."""
    page = Page(browser, (torch_site / "index.html").as_uri())
    try:
        page.tab("histograms")
        cards = page.draw_all("histograms")
        hists = site_histograms(torch_site)
        assert cards
        for card in cards:
            run, tag = int(card.get_attribute("data-run")), card.get_attribute("data-tag")
            drawn = page.page.evaluate("c => c.querySelector('.chart').data.map(t => "
                                       "[t.name, Array.from(t.x), Array.from(t.y)])", card)
            totals = {}
            for r, t, i, buckets in hists:
                if (r, t) == (run, tag):
                    totals[i] = float(buckets[:, 2].sum()) if len(buckets) else 0.0
            for _name, xs, ys in drawn:
                assert len(xs) == len(ys) == 30
                widths = np.diff(xs)
                assert np.allclose(widths, widths[0])
            # (the traces are of evenly picked steps: every drawn sum is one step's count)
            sums = sorted(round(sum(ys), 6) for _, _, ys in drawn)
            assert all(any(math.isclose(s, v, rel_tol=1e-9, abs_tol=1e-9)
                           for v in totals.values()) for s in sums), (tag, sums)
        assert page.errors == [], page.errors
    finally:
        page.close()
    from tensorboard.compat.proto import event_pb2, summary_pb2

    from tbconvert.formats.tfevents import records
    histo = summary_pb2.HistogramProto(min=3.0, max=3.0, num=100, sum=300.0, sum_squares=900.0,
                                       bucket_limit=[3.0], bucket=[100.0])
    event = event_pb2.Event(step=1, wall_time=1.0, summary=summary_pb2.Summary(
        value=[summary_pb2.Summary.Value(tag="bias", histo=histo)]))
    (tmp_path / "logs" / "run").mkdir(parents=True)
    (tmp_path / "logs" / "run" / "events.out.tfevents.1.h").write_bytes(
        records.frame(event.SerializeToString()))
    tbconvert.convert(tmp_path / "logs", tmp_path / "site", to_format="html")
    page = Page(browser, (tmp_path / "site" / "index.html").as_uri())
    try:
        page.tab("histograms")
        (card,) = page.draw_all("histograms")
        (trace,) = page.page.evaluate("c => c.querySelector('.chart').data.map(t => "
                                      "[Array.from(t.x), Array.from(t.y)])", card)
        xs, ys = trace
        assert max(ys) == 100.0 and sum(ys) == 100.0
        assert min(xs) < 3.0 < max(xs) and abs(xs[ys.index(100.0)] - 3.0) < 0.05
    finally:
        page.close()


@pytest.mark.parametrize("width", [375, 1920])
def test_the_page_fits_a_phone_and_a_wide_screen(browser, torch_site, width):
    page = Page(browser, (torch_site / "index.html").as_uri())
    try:
        page.page.set_viewport_size({"width": width, "height": 900})
        page.page.wait_for_timeout(300)
        cards = page.draw_all("scalars")
        # no sideways scrolling, and every chart within the screen
        assert page.page.evaluate("document.documentElement.scrollWidth") <= width
        for card in cards:
            box = card.bounding_box()
            assert box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5, box
        assert page.errors == [], page.errors
    finally:
        page.close()


def test_values_a_chart_cannot_draw_are_told_in_their_card(browser, tmp_path):
    from tensorboard.compat.proto import event_pb2, summary_pb2

    from tbconvert.formats.tfevents import records
    values = {"odd": [1.0, float("nan"), float("inf"), 2.0, float("-inf"), 3.0],
              "plain": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]}
    events = [event_pb2.Event(step=s, wall_time=1.0 + s, summary=summary_pb2.Summary(value=[
        summary_pb2.Summary.Value(tag=tag, simple_value=v[s]) for tag, v in values.items()]))
        for s in range(6)]
    (tmp_path / "logs" / "run").mkdir(parents=True)
    (tmp_path / "logs" / "run" / "events.out.tfevents.1.h").write_bytes(
        b"".join(records.frame(e.SerializeToString()) for e in events))
    tbconvert.convert(tmp_path / "logs", tmp_path / "site", to_format="html")
    page = Page(browser, (tmp_path / "site" / "index.html").as_uri())
    try:
        notes = {c.get_attribute("data-tag"): page.page.evaluate(
            "c => { const n = c.querySelector('.note'); return n && !n.hidden ? n.textContent "
            ": null }", c) for c in page.draw_all("scalars")}
        assert notes == {"odd": "3 values are NaN or infinite and not drawn (the CSV holds "
                                "them)", "plain": None}
        assert page.errors == [], page.errors
    finally:
        page.close()


def test_a_site_missing_its_manifest_names_the_file(browser, tmp_path):
    """A site copied without its data folder says which file did not load."""
    site = tmp_path / "site"
    tbconvert.convert(FIXTURES / "torch_logdir", site, to_format="html")
    (site / "data" / "manifest.js").unlink()
    page = Page(browser, (site / "index.html").as_uri())
    try:
        assert page.page.text_content("#empty") == (
            "data/manifest.js did not load: keep the data folder next to index.html.")
    finally:
        page.close()
