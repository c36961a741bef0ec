"""Media extraction: images, audio and text written as the files they are.

Layout: ``DIR/<run>/<tag>/<step>_<index>.<ext>``.

* ``<run>`` and ``<tag>`` are split on ``/`` and each part made safe with
  :func:`tbconvert.names.safe_part` (unsafe characters percent-escaped, so
  nothing escapes ``DIR`` and distinct names stay distinct). The root run
  ``"."`` is the directory ``%2E`` (a run named ``%2E`` is ``%252E``: a ``%``
  that reads as an escape is escaped itself, so it cannot clash with a run).
* Images (plugin ``images``): sample i of a step is ``<step>_<i>``; the
  extension comes from the first bytes (``png``, ``jpg``, ``gif``, else
  ``bin``). Audio (plugin ``audio``): each clip, ``wav`` when it is RIFF/WAVE.
  Text (plugin ``text``): each string element as UTF-8 ``.txt``, bytes
  unchanged (a rank-0 text is index 0; tables are flattened row-major); a
  number logged as text is its text, as in ``tbconvert.text()``. Points without
  text are reported (:func:`tbconvert.columns.nonscalar.text_points`).
* A name that cannot be a path as it is (unsafe characters, a part over
  200 bytes, a run and tag over 768 bytes together) is escaped or shortened
  with a digest of the whole name; a folder level that is already a file of
  another tag (tags ``a`` and ``a/0_0.png``) gets a ``~N`` suffix, and so does
  a folder that another run and tag made already (run ``a`` with tag ``b/c``,
  run ``a/b`` with tag ``c``). Each change is reported.
* With ``restarts="keep-all"`` hidden points are written too, as
  ``<step>_<index>.hidden.<ext>``.
* Blobs the source lost are reported, not written. Other series (scalars,
  histograms, graphs...) are counted in one note.
"""

from __future__ import annotations

import os
from pathlib import Path

from tbconvert.columns.nonscalar import UntoldHoles, media_items, sniff, with_text
from tbconvert.formats.base import Options
from tbconvert.model import BlobSequenceSeries, TensorSeries
from tbconvert.names import safe_part, shortened
from tbconvert.output import AtomicOutput, removed_on_failure
from tbconvert.report import Report, plural, were
from tbconvert.tables._source import feed

MEDIA_PLUGINS = ("images", "audio", "text")


_ROOT = safe_part(".")    # the root run's folder


def _parts(run: str, tag: str) -> list[str]:
    """Safe components of ``run`` then ``tag``, the whole kept under the path budget."""
    run_parts = [_ROOT] if run == "." else [safe_part(p) for p in run.split("/")]
    return shortened(run_parts + [safe_part(p) for p in tag.split("/")], f"{run}/{tag}")


class _Writer:
    def __init__(self, root: Path, report: Report) -> None:
        self.root = root
        self.report = report
        self.files = 0
        self.holes = UntoldHoles(report)
        self._folders: dict[tuple[str, str], Path] = {}
        self._owners: dict[Path, tuple[str, str]] = {}

    def folder(self, run: str, tag: str) -> Path:
        folder = self._folders.get((run, tag))
        if folder is None:
            parts = _parts(run, tag)
            folder = self._make(parts)
            # run "a" with tag "b/c" and run "a/b" with tag "c" both make a/b/c: the second
            # series gets a folder of its own
            taken_by, n = self._owners.get(folder), 1
            while folder in self._owners:
                n += 1
                folder = self._make(parts[:-1] + [f"{parts[-1]}~{n}"])
            self._folders[(run, tag)] = folder
            self._owners[folder] = (run, tag)
            natural = "/".join(parts)
            written = folder.relative_to(self.root).as_posix()
            if n > 1:
                self.report.add("name_clash", f"{run}/{tag}: {natural} holds run "
                                f"{taken_by[0]!r}, tag {taken_by[1]!r} already; written under "
                                f"{written}", run=run, tag=tag, lost=False)
            elif written != natural:
                self.report.add("name_clash", f"{run}/{tag}: {natural} was taken by a file of "
                                f"another tag; written under {written}", run=run, tag=tag,
                                lost=False)
            elif natural != f"{_ROOT if run == '.' else run}/{tag}":
                self.report.add("name_made_safe", f"{run}/{tag}: written under {natural} "
                                "(unsafe characters escaped or the path shortened)",
                                run=run, tag=tag, lost=False)
        return folder

    def _make(self, parts: list[str]) -> Path:
        """Create the folder level by level; a level that is a file already (a tag such as
        ``a/0_0.png`` beside the tag ``a``) gets a ``~N`` suffix instead of failing."""
        path = self.root
        for part in parts:
            name, n = part, 1
            while True:
                candidate = path / name
                try:
                    candidate.mkdir()
                    break
                except FileExistsError:
                    if candidate.is_dir() and not candidate.is_symlink():
                        break
                    n += 1
                    name = f"{part}~{n}"
            path = candidate
        return path

    def write(self, folder: Path, stem: str, ext: str, data: bytes, run: str, tag: str) -> None:
        path = folder / f"{stem}.{ext}"
        n = 1
        while True:
            try:
                with open(path, "xb") as f:
                    f.write(data)
                break
            except (FileExistsError, IsADirectoryError):
                n += 1
                path = folder / f"{stem}~{n}.{ext}"
        if n > 1:
            self.report.add("name_clash", f"{run}/{tag}: {stem}.{ext} was taken (several points "
                            f"at one step, or a clashing name); written as {path.name}",
                            run=run, tag=tag, lost=False)
        self.files += 1


def extract(source, out_dir: Path, options: Options, report: Report,
            fmt: str | None = None) -> int:
    """Write every media point of ``source`` (of format ``fmt``, None: told from it) under
    ``out_dir``; returns the number of files."""
    skipped: dict[str, int] = {}
    from tbconvert import api, remote
    src_path = source if isinstance(source, (str, os.PathLike)) else getattr(source, "path", None)
    if src_path is not None:
        api.check_paths(src_path, out_dir)
    out_dir = remote.localize(out_dir)
    if remote.is_remote(out_dir):
        stage = remote.staged_output(out_dir, options.storage_options, force=options.force,
                                     directory=True, report=report)
        try:
            files = extract(source, stage.local, options, report, fmt)
        except BaseException:
            stage.abort()
            raise
        stage.commit()
        remote.public_report(report)
        return files
    out_dir = Path(out_dir)
    out = AtomicOutput(out_dir, force=options.force, directory=True)
    with removed_on_failure(out.abort, out_dir, also=BaseException):
        writer = _Writer(out.tmp, report)

        def take(_run, chunk) -> bool:
            plugin = chunk.metadata.plugin_name
            if plugin in ("images", "audio") and isinstance(chunk, BlobSequenceSeries):
                _blobs(writer, chunk)
            elif plugin == "text" and isinstance(chunk, TensorSeries):
                _text(writer, chunk)
            else:
                key = plugin or chunk.data_class.name.lower()
                skipped[key] = skipped.get(key, 0) + len(chunk)
                return False
            return True
        feed(source, options, report, take, fmt)
        if writer.files:
            out.commit()
        else:
            out.abort()     # nothing to extract: no empty directory (an old one stays)
    if skipped:
        what = ", ".join(f"{k} ({v})" for k, v in sorted(skipped.items()))
        report.add("not_media", f"points that are not images, audio or text were not extracted: "
                   f"{what}", count=sum(skipped.values()), lost=False)
    if writer.files:
        report.outputs.append(str(out_dir))
    return writer.files


def _stem(chunk, p: int, index: int) -> str:
    hidden = chunk.hidden is not None and chunk.hidden[p]
    return f"{int(chunk.steps[p])}_{index}" + (".hidden" if hidden else "")


def _blobs(writer: _Writer, chunk: BlobSequenceSeries) -> None:
    folder = None
    lost = 0
    for p, i, blob, _size in media_items(chunk):
        if blob is None:
            lost += 1
            continue
        folder = folder or writer.folder(chunk.run, chunk.tag)
        writer.write(folder, _stem(chunk, p, i), sniff(blob), blob, chunk.run, chunk.tag)
    if lost:
        writer.holes.add(chunk.run, chunk.tag, lost, lambda n: (
            f"{chunk.run}/{chunk.tag}: {plural(n, 'blob')} {were(n)} lost by the source; no "
            f"file was written for {'it' if n == 1 else 'them'}"))


def _text(writer: _Writer, chunk: TensorSeries) -> None:
    chunk, cells = with_text(chunk, writer.report,
                             lambda n: f"no file was written for {'it' if n == 1 else 'them'}")
    folder = None
    for p, point in enumerate(cells):
        for i, cell in enumerate(point):
            data = cell if isinstance(cell, bytes) else cell.encode("utf-8")
            folder = folder or writer.folder(chunk.run, chunk.tag)
            writer.write(folder, _stem(chunk, p, i), "txt", data, chunk.run, chunk.tag)
