"""Both of TensorBoard's loaders show tbconvert's event files alike.

Plain ``tensorboard --logdir logs/`` reads with the Rust data server
(``--load_fast=auto``); ``--load_fast=false`` reads with the Python loader, the
one ``tests/oracle.py`` consults in process. They read some event files
differently (scalar dtypes, legacy values' metadata, repeated steps), so each
fixture's conversion is served by both, on 127.0.0.1 with sampling off, and
everything the dashboards ask for over HTTP must come back the same. Two
differences are left in place on purpose, and reported. Repeated steps: every
point is written and the report says, per tag, how many the default loader does
not show; what it shows is exactly what its rule keeps of the Python loader's
points. And a tag all of whose points a restart hides: listed without points by
the Python loader, as in the source, with the one point its restart marker hides
by the data server, which ignores restart markers.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import json
import math
import struct
import time
import urllib.error
import urllib.parse
import urllib.request
import wave
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from helpers import FIXTURES, LOGDIRS, launch_tensorboard, stop_process, tensorboard_base
from test_tbdev_server import SAMPLES

import tbconvert
from tbconvert.cli import main

EXPORT = FIXTURES / "tbdev_export" / "experiment_9bFlIkpYt5HfavHYMD5hzQ"
# A capacity above any series here for every plugin: sampling off.
SAMPLE_FLAGS = SAMPLES + ",tensors=100000"
REPEATED_STEPS = "steps_not_increasing"


# -- a TensorBoard server per loader ------------------------------------------------------

class TensorBoard:
    """``tensorboard --logdir`` on 127.0.0.1 with one loader; stopped by its pid."""

    def __init__(self, logdir: Path, load_fast: bool) -> None:
        self.load_fast = load_fast
        self.base = ""      # known once it listens (wait_ready)
        self.log_path = logdir.parent / f"tensorboard-{logdir.name}-{load_fast}.log"
        flags = [f"--load_fast={'true' if load_fast else 'false'}", "--reload_interval", "0",
                 "--samples_per_plugin", SAMPLE_FLAGS]
        if not load_fast:
            # loads everything before serving (allowed only with --reload_interval 0)
            flags += ["--reload_task", "blocking"]
        self.proc = launch_tensorboard(logdir, self.log_path, *flags)

    def stop(self) -> None:
        stop_process(self.proc)

    def get(self, path: str, **params) -> tuple[bytes, str]:
        url = self.base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        with urllib.request.urlopen(url, timeout=30) as resp:
            return resp.read(), resp.headers.get("Content-Type", "")

    def json(self, path: str, **params):
        return json.loads(self.get(path, **params)[0])

    def post_json(self, path: str, body: dict):
        req = urllib.request.Request(self.base + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def wait_ready(self) -> None:
        if not self.base:
            self.base = tensorboard_base(self.proc, self.log_path)
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                pytest.fail("tensorboard exited: " + self.log_path.read_text()[-2000:])
            try:
                env = self.json("/data/environment")
                break
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline:
                    pytest.fail("tensorboard did not start within 60 s")
                time.sleep(0.2)
        provider = env["debug"]["data_provider"]
        # the loader asked for is the one serving (no silent fallback)
        assert ("Grpc" in provider) == self.load_fast, provider

    def shown(self) -> dict:
        """What the dashboards are served; the data server loads in the background, so its
        answer counts once two in a row agree."""
        self.wait_ready()
        last = _everything(self)
        if not self.load_fast:
            return last
        deadline = time.monotonic() + 60
        while True:
            time.sleep(0.5)
            now = _everything(self)
            if _same(now, last):
                return now
            assert time.monotonic() < deadline, "the data server's answers never settled"
            last = now


@contextlib.contextmanager
def both_loaders(logdir: Path):
    servers = []
    try:
        for load_fast in (False, True):
            servers.append(TensorBoard(logdir, load_fast))
        with ThreadPoolExecutor(2) as pool:
            python, rust = pool.map(TensorBoard.shown, servers)
        yield python, rust
    finally:
        for s in servers:
            s.stop()


# -- everything the dashboards ask for ----------------------------------------------------

def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _blob_points(tb: TensorBoard, plugin: str, kind: str, run: str, tag: str, samples: int):
    """The points of each sample, with the bytes their opaque blob keys lead to (the keys
    themselves differ between the loaders)."""
    out = []
    single = "individualImage" if plugin == "images" else "individualAudio"
    for sample in range(samples):
        points = []
        for p in tb.json(f"/data/plugin/{plugin}/{kind}", run=run, tag=tag, sample=sample):
            data, ctype = tb.get(f"/data/plugin/{plugin}/{single}?" + p.pop("query"))
            if plugin == "images":
                p["content_type"] = ctype
            points.append({**p, "bytes": _digest(data), "size": len(data)})
        out.append(points)
    return out


def _everything(tb: TensorBoard) -> dict:
    view: dict = {"runs": tb.json("/data/runs")}
    listing = tb.json("/data/plugins_listing")
    # (the projector decides "enabled" in a thread of its own, started by the first listing:
    # when it flips depends on timing, not on the logdir; tests/test_plugin_copy.py compares
    # what the projector shows)
    view["plugins"] = {name: p.get("enabled") for name, p in listing.items()
                       if name != "projector"}
    for plugin, kind in (("scalars", "scalars"), ("histograms", "histograms"),
                         ("distributions", "distributions")):
        tags = tb.json(f"/data/plugin/{plugin}/tags")
        view[plugin] = {run: {tag: {**info, "points": tb.json(f"/data/plugin/{plugin}/{kind}",
                                                              run=run, tag=tag)}
                              for tag, info in ts.items()} for run, ts in tags.items()}
    for plugin, kind in (("images", "images"), ("audio", "audio")):
        tags = tb.json(f"/data/plugin/{plugin}/tags")
        view[plugin] = {run: {tag: {**info, "points": _blob_points(tb, plugin, kind, run, tag,
                                                                   info["samples"])}
                              for tag, info in ts.items()} for run, ts in tags.items()}
    tags = tb.json("/data/plugin/text/tags")
    view["text"] = {run: {tag: tb.json("/data/plugin/text/text", run=run, tag=tag)
                          for tag in sorted(ts)} for run, ts in tags.items()}
    tags = tb.json("/data/plugin/pr_curves/tags")
    view["pr_curves"] = {run: {tag: {**info, "points": tb.json("/data/plugin/pr_curves/pr_curves",
                                                               run=run, tag=tag)[run]}
                               for tag, info in ts.items()} for run, ts in tags.items()}
    view["custom_scalars"] = tb.json("/data/plugin/custom_scalars/layout")
    info = tb.json("/data/plugin/graphs/info")
    view["graphs"] = info
    view["run_graphs"] = {run: _digest(tb.get("/data/plugin/graphs/graph", run=run,
                                              conceptual="false")[0])
                          for run, i in info.items() if i["run_graph"]}
    view["hparams"] = {
        "experiment": tb.post_json("/data/plugin/hparams/experiment", {"experimentName": ""}),
        "sessions": tb.post_json("/data/plugin/hparams/session_groups", {
            "experimentName": "", "allowedStatuses": [
                "STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
            "colParams": [], "startIndex": 0, "sliceSize": 1000}),
    }
    return view


def _same(a, b) -> bool:
    return _difference(a, b) is None


def _difference(a, b, where: str = "") -> str | None:
    """Where two answers first differ (NaN equals NaN), or None."""
    if isinstance(a, dict) and isinstance(b, dict):
        if sorted(a) != sorted(b):
            return f"{where}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            found = _difference(a[k], b[k], f"{where}/{k}")
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = _difference(x, y, f"{where}[{i}]")
            if found:
                return found
        return None
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return None
    if a != b or type(a) is not type(b):
        return f"{where}: {a!r} != {b!r}"
    return None


# -- the data server's rule for repeated steps -------------------------------------------

def _step(point) -> int:
    return point["step"] if isinstance(point, dict) else point[1]


def preempted(points: list) -> list:
    """What the data server keeps of a tag's points read in this order: a point at step s
    takes the place of every earlier point at a step >= s."""
    kept: list = []
    for p in points:
        while kept and _step(kept[-1]) >= _step(p):
            kept.pop()
        kept.append(p)
    return kept


_SERIES = {"scalars": lambda t: t["points"], "histograms": lambda t: t["points"],
           "distributions": lambda t: t["points"], "pr_curves": lambda t: t["points"]}


def as_the_data_server_keeps_it(view: dict) -> tuple[dict, dict]:
    """The Python loader's answers with the data server's rule applied to every series, and
    how many points that rule drops per (run, tag)."""
    view = json.loads(json.dumps(view))
    dropped: dict = {}

    def apply(run, tag, points):
        kept = preempted(points)
        if len(kept) != len(points):
            dropped[run, tag] = len(points) - len(kept)
        return kept

    for plugin in ("scalars", "histograms", "distributions", "pr_curves"):
        for run, tags in view[plugin].items():
            for tag, t in tags.items():
                t["points"] = apply(run, tag, t["points"])
    for plugin in ("images", "audio"):
        for run, tags in view[plugin].items():
            for tag, t in tags.items():
                t["points"] = [apply(run, tag, pts) for pts in t["points"]]
    for run, tags in view["text"].items():
        for tag in tags:
            tags[tag] = apply(run, tag, tags[tag])
    return view, dropped


def _repeated_steps(report) -> dict:
    """{(run, tag): points the report says the default loader does not show}."""
    return {(i.run, i.tag): i.count for i in report.issues if i.kind == REPEATED_STEPS}


def assert_both_loaders_agree(python: dict, rust: dict, report) -> None:
    expected, dropped = as_the_data_server_keeps_it(python)
    found = _difference(rust, expected)
    assert found is None, f"--load_fast=true differs from --load_fast=false at {found}"
    assert dropped == _repeated_steps(report), "the report must name what the default loader drops"


# -- a small export with what the loaders used to disagree on -----------------------------

def _metadata(plugin: str, data_class: int, display: str, description: str,
              content: bytes = b"") -> str:
    from tensorboard.compat.proto import summary_pb2
    md = summary_pb2.SummaryMetadata(display_name=display, summary_description=description,
                                     data_class=data_class)
    md.plugin_data.plugin_name = plugin
    md.plugin_data.content = content
    return base64.b64encode(md.SerializeToString()).decode()


def _png(width: int, height: int, shade: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))
    rows = b"".join(b"\x00" + bytes([shade]) * (width * 3) for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def _wav(samples: int) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(np.arange(samples, dtype="<i2").tobytes())
    return buf.getvalue()


def small_export(root: Path) -> Path:
    """One run: a scalar float32 cannot hold (2**24 + 1, 0.1), scalars, a histogram, images
    and audio with display names and descriptions, and a tag logged twice at the same steps."""
    exp = root / "experiment_SMALLEXPORT00000000000000"
    (exp / "tensors").mkdir(parents=True)
    (exp / "blobs").mkdir()
    (exp / "metadata.json").write_text(json.dumps({"name": "small", "description": "both loaders"}))
    walls = [1700000000.0 + i for i in range(4)]
    scalars = [
        {"run": "train", "tag": "big", "points": {"steps": [0, 1, 2, 3], "wall_times": walls,
                                                   "values": [16777217.0, 0.5, 0.1, -2.0]},
         "summary_metadata": _metadata("scalars", 1, "A big number", "float32 *cannot* hold it")},
        {"run": "train", "tag": "loss", "points": {"steps": [0, 1, 2, 3], "wall_times": walls,
                                                    "values": [1.0, 0.5, 0.25, 0.125]},
         "summary_metadata": _metadata("scalars", 1, "loss", "")},
        {"run": "train", "tag": "resumed", "points": {"steps": [0, 1, 0, 1], "wall_times": walls,
                                                       "values": [4.0, 3.0, 2.0, 1.0]},
         "summary_metadata": _metadata("scalars", 1, "resumed", "twice from step 0")},
    ]
    (exp / "scalars.json").write_text("".join(json.dumps(s) + "\n" for s in scalars))
    hist = [np.array([[0.0, 1.0, 3.0], [1.0, 2.5, 1.0]], np.float32),
            np.array([[-1.0, 0.0, 2.0], [0.0, 4.0, 5.0]], np.float32)]
    np.savez(exp / "tensors" / "h.npz", *hist)
    tensors = [{"run": "train", "tag": "weights", "points": {
        "steps": [0, 1], "wall_times": walls[:2], "tensors_file_path": "tensors/h.npz"},
        "summary_metadata": _metadata("histograms", 2, "Weights", "per layer")}]
    (exp / "tensors.json").write_text("".join(json.dumps(t) + "\n" for t in tensors))
    blobs = {"w": b"3", "h": b"2", "img0": _png(3, 2, 0), "img1": _png(3, 2, 200),
             "wav0": _wav(80), "wav1": _wav(40)}
    for name, data in blobs.items():
        (exp / "blobs" / f"blob_{name}.bin").write_bytes(data)
    seqs = [
        {"run": "train", "tag": "samples", "points": {
            "steps": [0, 1], "wall_times": walls[:2],
            "blob_file_paths": [["blobs/blob_w.bin", "blobs/blob_h.bin", "blobs/blob_img0.bin"],
                                ["blobs/blob_w.bin", "blobs/blob_h.bin", "blobs/blob_img1.bin"]]},
         "summary_metadata": _metadata("images", 3, "Sample images", "what the model saw",
                                       b"\x10\x01")},
        {"run": "train", "tag": "speech", "points": {
            "steps": [0, 1], "wall_times": walls[:2],
            "blob_file_paths": [["blobs/blob_wav0.bin"], ["blobs/blob_wav1.bin"]]},
         "summary_metadata": _metadata("audio", 3, "Speech", "one clip a step",
                                       b"\x10\x0b\x18\x01")},
    ]
    (exp / "blob_sequences.json").write_text("".join(json.dumps(s) + "\n" for s in seqs))
    return exp


# -- the checks ---------------------------------------------------------------------------

def _kinds(report) -> dict:
    out: dict = {}
    for i in report.issues:
        out[i.kind] = out.get(i.kind, 0) + i.count
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", LOGDIRS)
def test_logdir_conversions(name, tmp_path):
    out = tmp_path / "logs"
    report = tbconvert.convert(FIXTURES / name, out, to_format="tfevents")
    with both_loaders(out) as (python, rust):
        assert python["scalars"]
        assert_both_loaders_agree(python, rust, report)


@pytest.mark.slow
def test_the_real_export(tmp_path):
    out = tmp_path / "logs"
    report = tbconvert.tbdev_export(EXPORT, out)
    with both_loaders(out) as (python, rust):
        assert_both_loaders_agree(python, rust, report)
        # every tag has its display name under both loaders (the data server showed "" for
        # points written in the legacy fields without a data class)
        for plugin in ("scalars", "histograms", "images"):
            for run, tags in rust[plugin].items():
                for tag, t in tags.items():
                    assert t["displayName"], (plugin, run, tag)
    # the tag logged twice over steps 20-29: all 50 points under --load_fast=false, 40 under
    # the default loader, and the report says so
    assert len(python["scalars"]["resumed"]["loss"]["points"]) == 50
    assert len(rust["scalars"]["resumed"]["loss"]["points"]) == 40
    assert _repeated_steps(report)["resumed", "loss"] == 10


@pytest.mark.slow
def test_a_small_export_with_what_loaders_disagreed_on(tmp_path):
    exp = small_export(tmp_path / "export")
    out = tmp_path / "logs"
    report = tbconvert.tbdev_export(exp, out)
    with both_loaders(out) as (python, rust):
        assert_both_loaders_agree(python, rust, report)
    scalars = rust["scalars"]["train"]
    assert scalars["big"]["displayName"] == "A big number"
    assert scalars["big"]["description"]
    # float32 is all either loader shows of a scalar: the values it rounds are counted
    assert [p[2] for p in scalars["big"]["points"]] == [16777216.0, 0.5, float(np.float32(0.1)), -2.0]
    assert _kinds(report)["scalar_rounded_to_float32"] == 2
    assert rust["histograms"]["train"]["weights"]["displayName"] == "Weights"
    assert rust["images"]["train"]["samples"]["description"]
    audio = rust["audio"]["train"]["speech"]
    assert audio["displayName"] == "Speech"
    assert {p["contentType"] for p in audio["points"][0]} == {"audio/wav"}
    assert [p[1] for p in scalars["resumed"]["points"]] == [0, 1]
    assert [p[1] for p in python["scalars"]["train"]["resumed"]["points"]] == [0, 1, 0, 1]


def test_rounded_scalars_fail_strict(tmp_path):
    exp = small_export(tmp_path / "export")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["tbdev-export", str(exp), "-o", str(tmp_path / "logs"), "--strict"])
    assert code == 8, err.getvalue()
    text = err.getvalue()
    assert "float32" in text and "train/big" in text
    # the repeated steps are a note: every point is in the file
    assert "--load_fast=false" in text


@pytest.mark.slow
def test_tags_whose_points_a_restart_all_hides(tmp_path):
    """The one restart marker tbconvert writes keeps such a tag listed for the Python loader,
    which lists it without points, as it lists the source's; the data server ignores the marker
    and shows the one point it hides, and the report says so."""
    from test_tfevents_writer import _all_hidden_logdir
    src = _all_hidden_logdir(tmp_path / "src")
    out = tmp_path / "logs"
    report = tbconvert.convert(src, out, to_format="tfevents")
    (note,) = [i for i in report.issues if i.kind == "tags_without_points_kept"]
    assert "default loader" in note.message and "shows that point" in note.message
    with both_loaders(out) as (python, rust):
        assert python["scalars"]["."]["b"]["points"] == []
        assert python["histograms"]["."]["h"]["points"] == []
        assert [p[1] for p in rust["scalars"]["."]["b"]["points"]] == [3]
        assert [p[1] for p in rust["histograms"]["."]["h"]["points"]] == [3]
        for plugin, tag in (("scalars", "b"), ("histograms", "h"), ("distributions", "h")):
            rust[plugin]["."][tag]["points"] = []
        assert_both_loaders_agree(python, rust, report)
