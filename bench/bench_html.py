"""Benchmark: the web view (``--to html``) of a 1M-point experiment, opened in headless Chromium.

For each layout: write the site from a Parquet archive (``tbconvert.convert(..., to_format="html")``),
then open ``index.html`` from disk in a fresh headless Chromium and time the first chart drawn
(from navigation start, as the page measures it: ``performance.now()`` when Plotly finished
the first chart), best and median of ``--repeat`` page loads. Goal: under 3 s.

Usage::

    python bench/bench_html.py [--points 1000000] [--repeat 3]
    python bench/bench_html.py --screenshot docs/img/html-fixture.png   # the docs' screenshot

Needs the ``html`` extra, Playwright (``pip install playwright``) and Chromium
(Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import installed
import numpy as np

import tbconvert
from tbconvert.formats.base import Options
from tbconvert.formats.parquet.writer import ParquetWriter
from tbconvert.model import DataClass, Metadata, Run, ScalarSeries
from tbconvert.report import Report

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ROOT = Path(__file__).resolve().parent.parent


def make_archive(path: Path, points: int, runs: int, tags: int) -> Path:
    """A Parquet archive of ``points`` float32 scalars: ``runs`` x ``tags`` series."""
    per = points // (runs * tags)
    rng = np.random.default_rng(0)
    md = Metadata("scalars", data_class=DataClass.SCALAR)
    with ParquetWriter(path, Options(), Report()) as w:
        for r in range(runs):
            name = f"run_{r}"
            chunks = []
            for t in range(tags):
                steps = np.arange(per, dtype=np.int64)
                values = (np.exp(-steps / per * 3) + 0.05 * rng.standard_normal(per)).astype(np.float32)
                chunks.append(ScalarSeries(run=name, tag=f"metric/{t}", metadata=md, steps=steps,
                                           wall_times=1.7e9 + steps * 0.5, hidden=None,
                                           values=values))
            w.write_run(Run(name, 1.7e9), iter(chunks))
    return path


def browser(playwright, profile: Path):
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        raise SystemExit("Chromium not found (Debian: apt-get install chromium)")
    return playwright.chromium.launch_persistent_context(
        str(profile), executable_path=exe, args=ARGS, headless=True,
        viewport={"width": 1400, "height": 1000})


def first_chart_ms(site: Path, profile: Path) -> float:
    """Milliseconds from navigation start to the first chart drawn, in a fresh browser."""
    from playwright.sync_api import sync_playwright
    shutil.rmtree(profile, ignore_errors=True)
    with sync_playwright() as p:
        context = browser(p, profile)
        try:
            page = context.new_page()
            errors = []
            page.on("console", lambda m: m.type == "error" and errors.append(m.text))
            page.goto((site / "index.html").as_uri())
            page.wait_for_selector(".card[data-state=drawn]", timeout=60000)
            ms = page.evaluate("tbView.firstChartMs")
            if errors:
                raise SystemExit(f"the page logged errors: {errors}")
            return ms
        finally:
            context.close()


def plotly_alone_ms(site: Path, profile: Path) -> float:
    """Milliseconds to DOMContentLoaded of a page that loads only the bundled plotly.js: the
    floor under every first chart (the library's own parse and start-up)."""
    from playwright.sync_api import sync_playwright
    page_path = site / "assets" / "plotly-alone.html"
    page_path.write_text('<!doctype html><html><head><script src="plotly.min.js"></script>'
                         "</head><body></body></html>")
    shutil.rmtree(profile, ignore_errors=True)
    with sync_playwright() as p:
        context = browser(p, profile)
        try:
            page = context.new_page()
            page.goto(page_path.as_uri())
            return page.evaluate("() => performance.getEntriesByType('navigation')[0]"
                                 ".domContentLoadedEventStart")
        finally:
            context.close()
            page_path.unlink()


def bench(points: int, repeat: int) -> None:
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    print("| layout | points | write site (s) | site size (MB) | first chart drawn, best (s) "
          "| median (s) | plotly.js alone, median (s) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for runs, tags in ((4, 5), (1, 1)):
        with tempfile.TemporaryDirectory(prefix="tbconvert-bench-html-") as tmp:
            tmp = Path(tmp)
            archive = make_archive(tmp / "logs.parquet", points, runs, tags)
            t0 = time.perf_counter()
            tbconvert.convert(archive, tmp / "site", to_format="html")
            write_s = time.perf_counter() - t0
            size = sum(f.stat().st_size for f in (tmp / "site").rglob("*") if f.is_file())
            times, alone = [], []
            for _ in range(repeat):
                times.append(first_chart_ms(tmp / "site", tmp / "profile") / 1000)
                alone.append(plotly_alone_ms(tmp / "site", tmp / "profile") / 1000)
            layout = f"{runs} runs x {tags} tags" if runs * tags > 1 else "one series"
            print(f"| {layout} | {points:,} | {write_s:.2f} | {size / 1e6:.1f} | "
                  f"{min(times):.2f} | {statistics.median(times):.2f} | "
                  f"{statistics.median(alone):.2f} |", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def screenshot(out: Path) -> None:
    """The fixture site (fixtures/torch_logdir) as users first see it."""
    from playwright.sync_api import sync_playwright
    with tempfile.TemporaryDirectory(prefix="tbconvert-shot-") as tmp:
        site = Path(tmp) / "site"
        tbconvert.convert(ROOT / "fixtures" / "torch_logdir", site, to_format="html")
        with sync_playwright() as p:
            context = browser(p, Path(tmp) / "profile")
            try:
                page = context.new_page()
                page.set_viewport_size({"width": 1280, "height": 800})
                page.goto((site / "index.html").as_uri())
                page.wait_for_function(
                    "() => Array.from(document.querySelectorAll('#panel-scalars .card'))"
                    ".slice(0, 4).every(c => c.dataset.state === 'drawn')", timeout=60000)
                page.wait_for_timeout(500)
                out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(out))
            finally:
                context.close()
    print(f"wrote {out}")


def main() -> None:
    installed.compile_package()   # commands start as an installed copy does
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--screenshot", type=Path, help="write the fixture site's screenshot here")
    a = ap.parse_args()
    if a.screenshot:
        screenshot(a.screenshot)
    else:
        bench(a.points, a.repeat)


if __name__ == "__main__":
    main()
