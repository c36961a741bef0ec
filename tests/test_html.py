"""The web view (``--to html``) as files: what the site holds, without a browser.

The browser tests (test_html_browser.py) open the same sites in Chromium.
"""

from __future__ import annotations

import base64
import io
import json
import re
import wave

import numpy as np
import pytest

pytest.importorskip("plotly")
pytest.importorskip("markdown_it")
pytest.importorskip("nh3")

from helpers import FIXTURES, run_tbconvert

import tbconvert
from tbconvert import verify
from tbconvert.errors import OutputExistsError
from tbconvert.formats.base import Options
from tbconvert.formats.html import HtmlWriter
from tbconvert.model import (
    BlobSequenceSeries,
    DataClass,
    Experiment,
    Metadata,
    Run,
    ScalarSeries,
    TensorSeries,
)
from tbconvert.report import Report

# What a log could hold to attack whoever opens the page.
HOSTILE_RUN = "<img src=x onerror=\"window.__pwned=1\">'run"
HOSTILE_TAG = "\"><script>window.__pwned=2</script>&amp;<b>tag</b>"
HOSTILE_NAME = "</script><script>window.__pwned=3</script>"
HOSTILE_TEXT = ("# Title\n\n<script>window.__pwned=4</script>\n\n<img src=x onerror=\"window.__pwned=5\">"
                "\n\n[click](javascript:window.__pwned=6) and [ok](https://example.org)\n\n"
                "<a href=\"javascript:alert(1)\">raw</a> **bold**")


# ------------------------------------------------------------------ reading a site back

def manifest(site) -> dict:
    text = (site / "data" / "manifest.js").read_text("ascii")
    m = re.fullmatch(r"tbData\.manifest\((.*)\);\n", text, re.S)
    assert m, text[:200]
    return json.loads(m.group(1))


def data_file(site, key: str):
    text = (site / "data" / f"{key}.js").read_text("ascii")
    m = re.fullmatch(r'tbData\.add\("(\w+)",(.*),(null|"[A-Za-z0-9+/=]*")\);\n', text, re.S)
    assert m and m.group(1) == key, text[:200]
    meta = json.loads(m.group(2))
    if m.group(3) == "null":
        return meta, None
    raw = base64.b64decode(m.group(3)[1:-1])
    cols = {name: np.frombuffer(raw, dtype="<" + dt, count=n, offset=off)
            for name, (dt, off, n) in meta["cols"].items()}
    return meta, cols


def elements(fragment: str):
    """The tag names and (name, value) attributes of an HTML fragment, as a browser parses it."""
    from html.parser import HTMLParser
    tags, attrs = set(), []

    class Parser(HTMLParser):
        def handle_starttag(self, tag, found):
            tags.add(tag)
            attrs.extend((k, v or "") for k, v in found)

    Parser().feed(fragment)
    return tags, attrs


def write_site(path, runs, experiment=Experiment(), **options) -> Report:
    """Write ``runs`` (``[(Run, [series...])]``) with the writer itself."""
    report = Report()
    with HtmlWriter(path, Options(**options), report) as writer:
        writer.write_experiment(experiment)
        for run, series in runs:
            writer.write_run(run, iter(series))
    return report


def scalar(run, tag, steps, values, wall=None, dtype=np.float32):
    steps = np.asarray(steps, np.int64)
    return ScalarSeries(run=run, tag=tag, metadata=Metadata("scalars", data_class=DataClass.SCALAR),
                        steps=steps, wall_times=wall if wall is not None else 1.7e9 + steps,
                        hidden=None, values=np.asarray(values, dtype))


def text_series(run, tag, texts):
    tensors = [np.array(t.encode(), dtype=object) for t in texts]
    return TensorSeries(run=run, tag=tag, metadata=Metadata("text", data_class=DataClass.TENSOR),
                        steps=np.arange(len(texts)), wall_times=1.7e9 + np.arange(len(texts)),
                        hidden=None, dtypes=np.full(len(texts), 7, np.int32), tensors=tensors)


def media_series(run, tag, plugin, sequences):
    return BlobSequenceSeries.from_sequences(
        run=run, tag=tag, metadata=Metadata(plugin, data_class=DataClass.BLOB_SEQUENCE),
        steps=np.arange(len(sequences)), wall_times=1.7e9 + np.arange(len(sequences)),
        hidden=None, sequences=sequences)


def image_bytes(fmt: str) -> bytes:
    from PIL import Image
    buf = io.BytesIO()
    Image.new("RGB", (4, 3), (200, 10, 10)).save(buf, format=fmt)
    return buf.getvalue()


def wav_bytes() -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(b"\0\0" * 80)
    return buf.getvalue()


@pytest.fixture(scope="module")
def torch_site(tmp_path_factory):
    site = tmp_path_factory.mktemp("html") / "site"
    report = tbconvert.convert(FIXTURES / "torch_logdir", site, to_format="html")
    return site, report


# ------------------------------------------------------------------ the fixture site

def test_site_layout_and_bundled_assets(torch_site):
    site, _ = torch_site
    from tbconvert.formats.html.writer import SCRIPTS
    for name in ("index.html", "assets/style.css", "assets/plotly.min.js", "data/manifest.js",
                 "experiment.parquet", *(f"assets/{s}" for s in SCRIPTS)):
        assert (site / name).is_file(), name
    page = (site / "index.html").read_text("utf-8")
    # Offline and under file://: nothing from the network, no fetch of data.
    assert "http://" not in page and "https://" not in page
    assert "Content-Security-Policy" in page and "script-src 'self'" in page
    for script in SCRIPTS:
        assert f'<script src="assets/{script}"></script>' in page
        code = (site / "assets" / script).read_text("utf-8")
        assert "fetch(" not in code and "XMLHttpRequest" not in code and "eval(" not in code
    assert not list(site.parent.glob(".*tbconvert-tmp*"))


def test_every_scalar_point_is_in_the_site(torch_site):
    site, _ = torch_site
    loaded = tbconvert.read(FIXTURES / "torch_logdir", restarts="keep-all")
    m = manifest(site)
    runs = [r["name"] for r in m["runs"]]
    # What TensorBoard shows: the points its restart rule hides are not charted.
    expected = {(run, tag): s.visible() for run, tags in loaded.series.items()
                for tag, s in tags.items() if isinstance(s, ScalarSeries)}
    got = {}
    for group in m["scalars"]:
        for entry in group["series"]:
            meta, cols = data_file(site, entry["key"])
            got[(runs[entry["run"]], group["tag"])] = (entry, meta, cols)
    assert set(got) == set(expected)
    for key, s in expected.items():
        entry, meta, cols = got[key]
        assert entry["n"] == meta["n"] == len(s)
        np.testing.assert_array_equal(cols["step"], s.steps)
        wall_meta, wall = data_file(site, meta["wall"])
        assert wall_meta["n"] == len(s)
        np.testing.assert_array_equal(wall["wall"], s.wall_times)
        np.testing.assert_array_equal(cols["value"], s.values)   # bit for bit, float32 kept
        assert cols["value"].dtype == s.values.dtype
        rows = (site / entry["csv"]).read_text("utf-8").splitlines()
        assert rows[0] == "run,tag,step,wall_time,value" and len(rows) == len(s) + 1
    tags = [g["tag"] for g in m["scalars"]]
    assert tags == sorted(tags)


def test_histograms_media_text_and_hparams(torch_site):
    site, _ = torch_site
    m = manifest(site)
    hist = {g["tag"]: g["series"] for g in m["histograms"]}
    assert set(hist) == {"weights/fc1", "grads/fc1", "act"}
    meta, cols = data_file(site, hist["weights/fc1"][0]["key"])
    assert meta["n"] == 5 and len(cols["offsets"]) == 6
    assert len(cols["buckets"]) == 3 * int(cols["offsets"][-1]) > 0
    images = {g["tag"]: g["series"] for g in m["images"]}
    assert set(images) == {"samples/image", "samples/batch"}
    meta, _ = data_file(site, images["samples/image"][0]["key"])
    assert meta["steps"] == [0, 49]
    for items in meta["items"]:
        (item,) = items
        assert (item["w"], item["h"]) == (16, 16)
        assert re.fullmatch(r"media/\d+\.png", item["src"])
        assert (site / item["src"]).read_bytes().startswith(b"\x89PNG")
    (audio,) = m["audio"]
    meta, _ = data_file(site, audio["series"][0]["key"])
    assert (site / meta["items"][0][0]["src"]).read_bytes()[8:12] == b"WAVE"
    (text,) = m["text"]
    meta, _ = data_file(site, text["series"][0]["key"])
    assert len(meta["html"]) == 2 and all(h.strip() for h in meta["html"])
    hp = m["hparams"]
    assert hp["columns"][0] == "run" and "lr" in hp["columns"] and "status" in hp["columns"]
    assert [r[0] for r in hp["rows"]] == ["train/1795299212.1548328"]


def test_what_the_page_cannot_show_is_reported_and_kept_in_parquet(torch_site):
    site, report = torch_site
    notes = [i for i in report.issues if i.kind == "not_in_web_view"]
    assert {i.tag for i in notes} >= {"pr/class_0", "__run_graph__"}
    assert not any(i.lost for i in notes)
    assert {n["plugin"] for n in manifest(site)["notShown"]} >= {"pr_curves", "graphs"}
    # The whole-experiment download holds every point TensorBoard shows.
    assert verify.compare(FIXTURES / "torch_logdir", site / "experiment.parquet") == []


def test_hparams_table_of_tensorflow_trials(tmp_path):
    tbconvert.convert(FIXTURES / "tf2_logdir", tmp_path / "site", to_format="html")
    hp = manifest(tmp_path / "site")["hparams"]
    assert [r[0] for r in hp["rows"]] == ["hparams/trial_0", "hparams/trial_1"]


def test_from_an_export_and_from_an_archive(tmp_path):
    export = next((FIXTURES / "tbdev_export").iterdir())
    tbconvert.convert(export, tmp_path / "a", to_format="html")
    m = manifest(tmp_path / "a")
    assert m["experiment"]["name"] and m["scalars"]
    tbconvert.convert(FIXTURES / "tensorboardx_logdir", tmp_path / "x.parquet")
    tbconvert.convert(tmp_path / "x.parquet", tmp_path / "b", to_format="html")
    assert manifest(tmp_path / "b")["scalars"]


# ------------------------------------------------------------------ safety

def test_hostile_names_and_text_stay_inert(tmp_path):
    site = tmp_path / "site"
    write_site(site, [(Run(HOSTILE_RUN, 1.7e9), [
        scalar(HOSTILE_RUN, HOSTILE_TAG, [0, 1, 2], [1.0, 2.0, 3.0]),
        text_series(HOSTILE_RUN, HOSTILE_TAG, [HOSTILE_TEXT]),
    ])], Experiment(name=HOSTILE_NAME, description=HOSTILE_TEXT))
    for path in (site / "data").iterdir():
        raw = path.read_text("ascii")
        # Data files carry names as JSON strings with "<" escaped: no markup at all.
        assert "<" not in raw, path.name
    m = manifest(site)
    assert m["runs"][0]["name"] == HOSTILE_RUN
    assert m["experiment"]["name"] == HOSTILE_NAME
    assert m["scalars"][0]["tag"] == HOSTILE_TAG
    meta, _ = data_file(site, m["text"][0]["series"][0]["key"])
    (rendered,) = meta["html"]
    assert "<h1>Title</h1>" in rendered and "<strong>bold</strong>" in rendered
    assert '<a href="https://example.org"' in rendered
    tags, attrs = elements(rendered)
    assert not tags & {"script", "img", "iframe", "svg", "object", "style"}, rendered
    assert not [a for a in attrs if a[0].startswith("on")], rendered
    assert all(v.startswith(("https:", "http:", "mailto:")) for k, v in attrs if k == "href")
    # The raw HTML of the log is shown as text (escaped), not dropped silently.
    assert "&lt;script&gt;" in rendered


def test_text_that_is_not_utf8_is_shown_with_replacement_characters(tmp_path):
    site = tmp_path / "site"
    chunk = text_series("r", "notes", ["x"])
    chunk = TensorSeries(**{**{f: getattr(chunk, f) for f in ("run", "tag", "metadata", "steps",
                                                               "wall_times", "hidden", "dtypes")},
                            "tensors": [np.array(b"ok \xff\xfe *still* read", dtype=object)]})
    report = write_site(site, [(Run("r", None), [chunk])])
    meta, _ = data_file(site, manifest(site)["text"][0]["series"][0]["key"])
    assert meta["html"] == ["<p>ok \ufffd\ufffd <em>still</em> read</p>\n"]
    assert any(i.kind == "text_not_utf8" for i in report.issues)


def test_media_only_in_their_real_types(tmp_path):
    site = tmp_path / "site"
    png, gif, jpeg, bmp = (image_bytes(f) for f in ("PNG", "GIF", "JPEG", "BMP"))
    report = write_site(site, [(Run("r", 1.7e9), [
        media_series("r", "img", "images", [[b"4", b"3", png, gif], [b"4", b"3", jpeg, bmp],
                                            [b"4", b"3", None]]),
        media_series("r", "snd", "audio", [[wav_bytes()], [b"OggS" + b"\0" * 40]]),
        media_series("r", "fake", "images", [[b"4", b"3", b"<svg onload=alert(1)>"]]),
    ])])
    files = sorted(p.name for p in (site / "media").iterdir())
    assert sorted(f.rsplit(".", 1)[1] for f in files) == ["gif", "jpg", "png", "wav"]
    signatures = {"png": b"\x89PNG", "gif": b"GIF8", "jpg": b"\xff\xd8\xff", "wav": b"RIFF"}
    for f in files:
        assert (site / "media" / f).read_bytes().startswith(signatures[f.rsplit(".", 1)[1]])
    kinds = {(i.kind, i.tag): i for i in report.issues}
    assert kinds[("media_not_shown", "img")].count == 1          # the BMP
    assert kinds[("media_not_shown", "snd")].count == 1          # the Ogg clip
    assert kinds[("media_not_shown", "fake")].count == 1         # not an image at all
    assert kinds[("lost_blob_not_shown", "img")].count == 1
    m = manifest(site)
    meta, _ = data_file(site, next(g for g in m["images"] if g["tag"] == "img")["series"][0]["key"])
    assert [len(items) for items in meta["items"]] == [2, 1, 0]


# ------------------------------------------------------------------ odd data

def test_values_of_any_dtype_nan_and_big_steps(tmp_path):
    site = tmp_path / "site"
    steps = [0, 1, 2 ** 53 + 1]
    report = write_site(site, [(Run("r", None), [
        scalar("r", "ints", steps, [1, 2, 3], dtype=np.int64),
        scalar("r", "nan", [0, 1, 2], [np.nan, np.inf, -1.0], dtype=np.float64),
        scalar("r", "mixed", [0], [1.5], dtype=np.float32),
        scalar("r", "mixed", [1], [2.5], dtype=np.float64),
    ])])
    m = manifest(site)
    got = {g["tag"]: data_file(site, g["series"][0]["key"])[1] for g in m["scalars"]}
    np.testing.assert_array_equal(got["ints"]["value"], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(got["nan"]["value"], [np.nan, np.inf, -1.0])
    np.testing.assert_array_equal(got["mixed"]["value"], [1.5, 2.5])
    assert any(i.kind == "steps_rounded_in_view" and not i.lost for i in report.issues)
    mixed = next(g for g in m["scalars"] if g["tag"] == "mixed")["series"][0]["csv"]
    assert (site / mixed).read_text().splitlines()[1:] == ["r,mixed,0,1700000000.0,1.5",
                                                           "r,mixed,1,1700000001.0,2.5"]


def test_hidden_points_are_left_out_of_the_charts_and_kept_in_parquet(tmp_path):
    s = scalar("r", "loss", [0, 1, 1], [1.0, 2.0, 3.0])
    s = s.with_hidden(np.array([False, True, False]))
    site = tmp_path / "site"
    report = write_site(site, [(Run("r", 1.7e9), [s])], restarts="keep-all")
    m = manifest(site)
    _, cols = data_file(site, m["scalars"][0]["series"][0]["key"])
    np.testing.assert_array_equal(cols["value"], [1.0, 3.0])
    assert any(i.kind == "hidden_points_not_shown" for i in report.issues)
    table = tbconvert.scalars_table(site / "experiment.parquet", restarts="keep-all")
    assert table.num_rows == 3


def test_an_empty_source_gives_a_page_that_says_so(tmp_path):
    site = tmp_path / "site"
    write_site(site, [(Run("r", None), [])])
    m = manifest(site)
    assert m["scalars"] == [] and m["hparams"] is None and len(m["runs"]) == 1


# ------------------------------------------------------------------ destination safety

def test_existing_destination_needs_force_and_failure_leaves_nothing(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "keep.txt").write_text("old")
    with pytest.raises(OutputExistsError):
        tbconvert.convert(FIXTURES / "tensorboardx_logdir", site, to_format="html")
    assert (site / "keep.txt").read_text() == "old"
    tbconvert.convert(FIXTURES / "tensorboardx_logdir", site, to_format="html", force=True)
    assert (site / "index.html").is_file() and not (site / "keep.txt").exists()

    class Boom(Exception):
        pass

    def exploding():
        yield scalar("r", "a", [0], [1.0])
        raise Boom

    out = tmp_path / "broken"
    with pytest.raises(Boom):
        with HtmlWriter(out, Options(), Report()) as writer:
            writer.write_run(Run("r"), exploding())
    assert not out.exists() and not list(tmp_path.glob(".*tbconvert-tmp*"))


def test_command_line(tmp_path):
    p = run_tbconvert("convert", FIXTURES / "tensorboardx_logdir", tmp_path / "site", "--to", "html")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    p = run_tbconvert("convert", FIXTURES / "tensorboardx_logdir", tmp_path / "site", "--to", "html")
    assert p.returncode == 6 and "--force" in p.stderr and "Traceback" not in p.stderr
    assert "html" in run_tbconvert("formats").stdout


def test_a_missing_charting_package_is_one_clear_error_before_anything_is_written(
        tmp_path, monkeypatch):
    from tbconvert.errors import MissingDependencyError
    monkeypatch.setitem(__import__("sys").modules, "plotly", None)   # as if not installed
    with pytest.raises(MissingDependencyError, match=r"tbconvert\[html\]"):
        tbconvert.convert(FIXTURES / "tensorboardx_logdir", tmp_path / "site", to_format="html")
    assert list(tmp_path.iterdir()) == []


def test_text_keeps_only_whole_web_and_mail_links():
    from tbconvert.formats.html import markdown
    html = markdown.render("[a](//example.com/x) [b](../../etc/passwd) [c](/abs) [d](#top) "
                           "[e](https://example.org/y) [f](mailto:x@example.org) "
                           "[g](javascript:alert(1)) [h](file:///etc/passwd)")
    hrefs = re.findall(r'href="([^"]*)"', html)
    assert hrefs == ["https://example.org/y", "mailto:x@example.org"], html
    assert all(f">{c}</a>" in html for c in "abcdef")     # the words stay, as text


@pytest.mark.parametrize("extra", [[], ["--from", "parquet"]])
def test_a_web_view_given_as_a_source_names_its_data_file(tmp_path, extra):
    site = tmp_path / "site"
    tbconvert.convert(FIXTURES / "torch_logdir", site, to_format="html")
    proc = run_tbconvert("info", site, *extra, capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.strip() == (f"tbconvert: error: {site}: a web view tbconvert wrote "
                                   f"(--to html); the data it shows is in "
                                   f"{site / 'experiment.parquet'}: pass that file instead")
    assert run_tbconvert("info", site / "experiment.parquet").returncode == 0
