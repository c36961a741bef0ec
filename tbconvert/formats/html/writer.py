"""HtmlWriter: the experiment as a static site (see the package docstring and docs/html.md).

Layout of the output directory::

    index.html              the page (no data in it)
    assets/                 the page's scripts, style.css, plotly.min.js (bundled: no network)
    data/manifest.js        runs, tags, hparams table: what the page lists
    data/<key>.js           one series' points, loaded when its chart is drawn
    csv/<key>.csv           one series' points as CSV (the per-series download link)
    media/<n>.<ext>         images and audio clips (PNG, GIF, JPEG, WAV only)
    experiment.parquet      every point, for the whole-experiment download

Runs arrive one at a time; a run's series are kept until the run ends (as every
writer may), then written. Everything the page cannot show (graphs, PR curves,
other plugins' data) is still in ``experiment.parquet`` and is reported.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from importlib import resources

import numpy as np

from tbconvert.columns import ScalarColumns
from tbconvert.columns.hparams import END_TAG, EXPERIMENT_TAG, START_TAG, Collected, trials_table
from tbconvert.columns.nonscalar import HistogramColumns, TextColumns, no_text, sniff, text_points
from tbconvert.formats.base import Options, Writer
from tbconvert.formats.csv import encode as csv_encode
from tbconvert.formats.html import PARQUET_NAME, pack, vendor
from tbconvert.formats.html.markdown import render_tensor
from tbconvert.formats.parquet.writer import ParquetWriter
from tbconvert.model import (
    BlobSequenceSeries,
    Experiment,
    Run,
    ScalarSeries,
    Series,
    TensorSeries,
    as_scalar_series,
    concat,
)
from tbconvert.output import AtomicOutput
from tbconvert.report import Report, are, plural

# The page's own scripts, in the order index.html loads them.
SCRIPTS = ("util.js", "data.js", "scalars.js", "histograms.js", "media.js", "hparams.js", "page.js")
ASSETS = ("index.html", "style.css", *SCRIPTS)
# What a browser is given: only these types, named by their real content.
MEDIA_TYPES = {"images": ("png", "gif", "jpg"), "audio": ("wav",)}
EXACT_STEPS = 2 ** 53   # JavaScript numbers hold every integer step below this


class HtmlWriter(Writer):
    keeps_hidden = False    # the page shows what TensorBoard shows

    def __init__(self, path, options: Options, report: Report) -> None:
        super().__init__(path, options, report)
        vendor.check()
        self._out = AtomicOutput(self.path, force=options.force, directory=True)
        self._root = self._out.tmp
        self._experiment = Experiment()
        self._runs: list[dict] = []
        self._lists: dict[str, dict[str, list]] = {k: {} for k in
                                                  ("scalars", "histograms", "images", "audio",
                                                   "text")}
        self._not_shown: list[dict] = []
        self._hparams = Collected()
        self._keys = 0
        self._media = 0
        self._parquet = None
        self.guard(self._start)

    def _start(self) -> None:
        for sub in ("assets", "data", "csv", "media"):
            (self._root / sub).mkdir()
        here = resources.files("tbconvert.formats.html") / "assets"
        for name in ASSETS:
            target = self._root / name if name == "index.html" else self._root / "assets" / name
            target.write_bytes((here / name).read_bytes())
        (self._root / "assets" / "plotly.min.js").write_bytes(vendor.plotly_js())
        self._parquet = ParquetWriter(self._root / PARQUET_NAME,
                                      replace(self.options, force=False, progress=None),
                                      self.report)

    # ------------------------------------------------------------------ writer contract

    def write_experiment(self, experiment: Experiment) -> None:
        self._experiment = experiment
        self._parquet.write_experiment(experiment)

    def write_run(self, run: Run, series: Iterable[Series]) -> None:
        self.guard(lambda: self._write_run(run, series))

    def close(self) -> None:
        def finish():
            self._parquet.close()
            manifest = self._manifest()
            (self._root / "data" / "manifest.js").write_bytes(
                f"tbData.manifest({pack.js_json(manifest)});\n".encode("ascii"))
            self._out.commit()
        self.guard(finish)

    def abort(self) -> None:
        if self._parquet is not None:
            self._parquet.abort()
        self._out.abort()

    # ------------------------------------------------------------------ one run

    def _write_run(self, run: Run, series: Iterable[Series]) -> None:
        index = len(self._runs)
        self._runs.append({"name": run.name, "start": run.start_time})
        held = _RunSeries()
        self._parquet.write_run(run, self._observe(index, run, series, held))
        for tag, chunks in held.scalars.items():
            self._write_scalars(index, tag, chunks)
        for tag, chunks in held.histograms.items():
            self._write_histograms(index, tag, chunks)
        for tag, chunks in held.text.items():
            self._write_text(index, tag, chunks)
        for (plugin, tag), points in held.media.items():
            self._add(plugin, tag, index, self._data_file(points), len(points["steps"]))
        for tag, (plugin, n) in held.others.items():
            self._not_shown.append({"run": index, "tag": tag, "plugin": plugin, "points": n})
            self.report.add("not_in_web_view",
                            f"{run.name}/{tag}: {plural(n, 'point')} ({plugin}) "
                            f"{are(n)} not shown by the web view; kept in "
                            f"{PARQUET_NAME}", run=run.name, tag=tag, count=n,
                            lost=False)
        self._hparams.add(run.name, held.for_hparams, self.report)

    def _observe(self, index: int, run: Run, series: Iterable[Series], held: _RunSeries):
        """Each chunk, taken in for the page on its way to the Parquet archive."""
        for chunk in series:
            shown = chunk
            if chunk.hidden is not None:
                shown = chunk.visible()
                self.report.add("hidden_points_not_shown",
                                f"{run.name}/{chunk.tag}: {plural(chunk.hidden_count, 'point')} "
                                "TensorBoard's restart rule hides "
                                f"{are(chunk.hidden_count)} not charted (kept "
                                f"in {PARQUET_NAME}, marked)", run=run.name, tag=chunk.tag,
                                count=chunk.hidden_count, lost=False)
            if len(shown):
                self._take(shown, held)
            yield chunk

    def _take(self, chunk: Series, held: _RunSeries) -> None:
        plugin = chunk.metadata.plugin_name
        chunk = as_scalar_series(chunk, self.report) or chunk
        if isinstance(chunk, ScalarSeries):
            held.scalars.setdefault(chunk.tag, []).append(chunk)
            held.for_hparams.append(chunk.take([len(chunk) - 1]))
        elif plugin == "histograms" and isinstance(chunk, TensorSeries):
            held.histograms.setdefault(chunk.tag, []).append(chunk)
        elif plugin == "text" and isinstance(chunk, TensorSeries):
            held.text.setdefault(chunk.tag, []).append(chunk)
        elif plugin in MEDIA_TYPES and isinstance(chunk, BlobSequenceSeries):
            points = held.media.setdefault((plugin, chunk.tag),
                                           {"steps": [], "wall": [], "items": []})
            self._write_media(plugin, chunk, points)
        elif plugin == "hparams" and chunk.tag in (EXPERIMENT_TAG, START_TAG, END_TAG):
            held.for_hparams.append(chunk)
        else:
            what = plugin or chunk.data_class.name.lower()
            entry = held.others.setdefault(chunk.tag, [what, 0])
            entry[1] += len(chunk)

    # ------------------------------------------------------------------ series kinds

    def _key(self, prefix: str) -> str:
        self._keys += 1
        return f"{prefix}{self._keys}"

    def _add(self, kind: str, tag: str, run: int, key: str, n: int, csv: str | None = None) -> None:
        entry = {"run": run, "key": key, "n": n}
        if csv:
            entry["csv"] = csv
        self._lists[kind].setdefault(tag, []).append(entry)

    def _csv(self, key: str, table) -> str:
        name = f"csv/{key}.csv"
        with open(self._root / name, "xb") as fh:
            csv_encode.write(table, fh)
        return name

    def _check_steps(self, chunk: Series) -> None:
        if len(chunk) and int(np.abs(chunk.steps).max()) >= EXACT_STEPS:
            self.report.add("steps_rounded_in_view",
                            f"{chunk.run}/{chunk.tag}: steps of 2**53 or more are charted rounded "
                            "(the CSV and Parquet downloads keep them exact)",
                            run=chunk.run, tag=chunk.tag, lost=False)

    def _write_scalars(self, run: int, tag: str, chunks: list) -> None:
        if len({c.values.dtype for c in chunks}) > 1:
            chunks = [replace(c, values=c.values.astype(np.float64)) for c in chunks]
        s = concat(chunks)
        self._check_steps(s)
        values = s.values if s.values.dtype == np.float32 else s.values.astype(np.float64)
        key = self._key("s")
        # Wall times are a file of their own: the step axis, the one a page opens with,
        # never loads them.
        layout, payload = pack.columns([("step", s.steps), ("value", values)])
        self._write_data(key, {"n": len(s), "cols": layout, "wall": key + "w"}, payload)
        layout, payload = pack.columns([("wall", s.wall_times)])
        self._write_data(key + "w", {"n": len(s), "cols": layout}, payload)
        cols = ScalarColumns(False, self.report)
        cols.add_chunk(s)
        csv = self._csv(key, cols.long_table())
        self._add("scalars", tag, run, key, len(s), csv)

    def _write_histograms(self, run: int, tag: str, chunks: list) -> None:
        cols = HistogramColumns(False, self.report)
        kept = []
        for chunk in chunks:
            good = [i for i, t in enumerate(chunk.tensors)
                    if t.ndim == 2 and t.shape[1] == 3 and t.dtype.kind in "fiu"]
            cols.add_chunk(chunk)   # reports the points that are not histograms
            if good:
                kept.append(chunk.take(good))
        if not kept:
            return
        s = concat(kept)
        self._check_steps(s)
        sizes = np.array([t.shape[0] for t in s.tensors], np.int64)
        offsets = np.zeros(len(s) + 1, np.float64)
        np.cumsum(sizes, out=offsets[1:])
        buckets = (np.concatenate([t.astype(np.float64).reshape(-1) for t in s.tensors])
                   if len(s) else np.zeros(0))
        layout, payload = pack.columns([("step", s.steps), ("wall", s.wall_times),
                                        ("offsets", offsets), ("buckets", buckets)])
        key = self._key("h")
        csv = self._csv(key, cols.arrow())
        self._write_data(key, {"n": len(s), "cols": layout}, payload)
        self._add("histograms", tag, run, key, len(s), csv)

    def _write_text(self, run: int, tag: str, chunks: list) -> None:
        cols = TextColumns(False, self.report)
        steps, wall, rendered, skipped = [], [], [], []
        for chunk in chunks:
            keep, cells, no = text_points(chunk)
            if no:
                skipped += no
                chunk = chunk.take(keep)
            cols.add_cells(chunk, cells)   # reports text that is not UTF-8
            for i, (t, point) in enumerate(zip(chunk.tensors, cells, strict=True)):
                text = np.empty(len(point), dtype=object)
                text[:] = [c.decode("utf-8", "replace") if isinstance(c, bytes) else c
                           for c in point]
                steps.append(int(chunk.steps[i]))
                wall.append(float(chunk.wall_times[i]))
                rendered.append(render_tensor(text.reshape(np.shape(t))))
        if skipped:
            name, n = chunks[0].run, len(skipped)
            self._not_shown.append({"run": run, "tag": tag, "plugin": "text", "points": n})
            self.report.add("not_in_web_view",
                            f"{name}/{tag}: {no_text(skipped)}; {'it is' if n == 1 else 'they are'}"
                            f" not shown by the web view; kept in {PARQUET_NAME}",
                            run=name, tag=tag, count=n, lost=False)
        if not steps:
            return
        key = self._key("t")
        csv = self._csv(key, cols.arrow())
        self._write_data(key, {"steps": steps, "wall": wall, "html": rendered})
        self._add("text", tag, run, key, len(steps), csv)

    def _write_media(self, plugin: str, chunk: BlobSequenceSeries, points: dict) -> None:
        allowed = MEDIA_TYPES[plugin]
        other: dict[str, int] = {}
        missing = 0
        for p, seq in enumerate(chunk.sequences()):
            size = [_int(b) for b in seq[:2]] if plugin == "images" else None
            items = []
            for blob in (seq[2:] if plugin == "images" else seq):
                if blob is None:
                    missing += 1
                    continue
                ext = sniff(blob)
                if ext not in allowed:
                    other[ext] = other.get(ext, 0) + 1
                    continue
                self._media += 1
                name = f"media/{self._media}.{ext}"
                with open(self._root / name, "xb") as fh:
                    fh.write(blob)
                item = {"src": name}
                if size is not None:
                    item["w"], item["h"] = size
                items.append(item)
            points["steps"].append(int(chunk.steps[p]))
            points["wall"].append(float(chunk.wall_times[p]))
            points["items"].append(items)
        where = f"{chunk.run}/{chunk.tag}"
        for ext, n in other.items():
            self.report.add("media_not_shown",
                            f"{where}: {plural(n, 'blob')} ({plugin}) of type {ext} "
                            f"{are(n)} not shown (the page shows "
                            f"{', '.join(allowed)} only); kept in {PARQUET_NAME}",
                            run=chunk.run, tag=chunk.tag, count=n, lost=False)
        if missing:
            self.report.add("lost_blob_not_shown",
                            f"{where}: {plural(missing, 'blob')} ({plugin}) the source lost "
                            f"{are(missing)} not shown",
                            run=chunk.run, tag=chunk.tag, count=missing, lost=False)
        points["key"] = points.get("key") or self._key("m")

    def _data_file(self, points: dict) -> str:
        key = points.pop("key")
        self._write_data(key, points)
        return key

    def _write_data(self, key: str, meta: dict, payload: str | None = None) -> None:
        with open(self._root / "data" / f"{key}.js", "xb") as fh:
            fh.write(pack.data_file(key, meta, payload))

    # ------------------------------------------------------------------ the manifest

    def _manifest(self) -> dict:
        e = self._experiment
        out = {"experiment": {"id": e.experiment_id, "name": e.name,
                              "description": e.description, "created": e.create_time},
               "runs": self._runs, "parquet": PARQUET_NAME, "notShown": self._not_shown,
               "hparams": self._hparams_table()}
        for kind, tags in self._lists.items():
            out[kind] = [{"tag": tag, "series": tags[tag]} for tag in sorted(tags)]
        return out

    def _hparams_table(self):
        if not self._hparams.starts:
            return None
        table = trials_table(self._hparams, self.report)
        n = table.num_columns
        # the table ends with the start and end times (an hparam may end in "_time" too)
        return {"columns": table.column_names, "times": [n - 2, n - 1],
                "rows": [list(r.values()) for r in table.to_pylist()]}


class _RunSeries:
    """What one run holds for the page, by kind and tag, until the run ends."""

    def __init__(self) -> None:
        self.scalars: dict[str, list] = {}
        self.histograms: dict[str, list] = {}
        self.text: dict[str, list] = {}
        self.media: dict[tuple[str, str], dict] = {}
        self.others: dict[str, list] = {}
        self.for_hparams: list = []


def _int(b):
    try:
        return int(b)
    except (TypeError, ValueError):
        return None
