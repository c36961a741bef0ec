"""Syncing a TensorBoard.dev export: an experiment is read again whole when its files changed.

An export has no file that grows record by record: a newer export of the same experiment
replaces its files. So the manifest keeps a fingerprint of the experiment's files (relative
path, size and modification time of each); while it matches, nothing is read, and when it
differs, every run of the experiment is written again as parts of a new generation that
replace the old ones. An export root (``experiment_<id>/`` directories) becomes one dataset
per experiment, ``DST/<id>/``, each kept like that.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from tbconvert import sourcefiles


def fingerprint(path: Path) -> tuple[str, int]:
    """A digest of the names, sizes and modification times of the files under ``path``, and
    the bytes of its regular files."""
    items = []
    if path.is_file():
        st = path.stat()
        items.append((path.name, st.st_size, st.st_mtime_ns))
        size = st.st_size
    else:
        size = 0
        # directories in name order, listed as sources are: their access times kept
        for dirpath, dirnames, filenames in sourcefiles.walk(path):
            dirnames.sort()
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                try:
                    st = os.stat(full)
                except OSError:
                    continue
                items.append((os.path.relpath(full, path), st.st_size, st.st_mtime_ns))
                size += st.st_size if stat.S_ISREG(st.st_mode) else 0
    h = hashlib.sha256()
    for rel, n, mtime in items:
        h.update(f"{rel}\0{n}\0{mtime}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest(), size


def sync_experiment(src: Path, dst: Path, report, store=None, allow_pickle: bool = False) -> None:
    """Bring the dataset ``dst`` (locked by the caller) up to date with one experiment;
    ``store``: a :class:`~tbconvert.incremental.store.StoreDataset` whose stage ``dst`` is."""
    from tbconvert.formats.parquet import schema as S
    from tbconvert.incremental import manifest
    manifest = manifest if store is None else store      # the dataset's committing side

    marker = manifest.load(dst, report)
    manifest.remove_garbage(dst, marker)
    state = marker["sync"]
    known = state["runs"]
    seen, size = fingerprint(src)
    report.generation = state["generation"]
    if state.get("export") == seen:
        report.runs += len(known)
        report.runs_unchanged += len(known)
        return
    generation = report.generation = state["generation"] + 1
    from tbconvert.output import removed_on_failure
    # What this generation wrote goes unless it is committed, and a full disk is told as
    # every output tells it (the caller then removes a first sync's directory, empty again).
    with removed_on_failure(lambda: manifest.remove_garbage(dst, marker), dst,
                            also=BaseException):
        experiment, parts, runs_state = _write_parts(src, dst, generation, known, report,
                                                     allow_pickle)
        manifest.publish(dst, [p["file"] for p in parts])
        manifest.commit(dst, {"format": S.FORMAT_NAME, "schema_version": S.SCHEMA_VERSION,
                              "experiment": S.experiment_to_json(experiment), "parts": parts,
                              "sync": {"generation": generation, "runs": runs_state,
                                       "export": seen}})
    manifest.remove_garbage(dst, {"parts": parts}, retire=True)
    for name in known:
        if name not in runs_state:
            report.runs_removed += 1
            report.add("run_removed", f"{name}: no longer in the export; taken out of the "
                       "dataset (as a full conversion would leave it out)", run=name, lost=False)
    if known:
        report.add("export_read_whole", f"{src}: the export's files changed; its runs were "
                   "read whole again", path=src, lost=False)
    report.new_bytes += size


def _write_parts(src: Path, dst: Path, generation: int, known: dict, report,
                 allow_pickle: bool = False):
    """Every run of the experiment as a part of ``generation``, under its pending name;
    ``(experiment, the manifest's parts, its runs)``."""
    from tbconvert import api
    from tbconvert.formats.base import Options
    from tbconvert.formats.parquet.writer import part_name, write_part
    from tbconvert.incremental.files import pending_name
    options = Options(allow_pickle=allow_pickle)
    parts, runs_state = [], {}
    with api.open_reader(src, format="tbdev", options=options, report=report) as reader:
        experiment = reader.experiment()
        for index, (run, chunks) in enumerate(
                api.selected_runs(reader, options, report, keeps_hidden=True)):
            name = part_name(index, run.name, generation)
            write_part(dst / pending_name(name), experiment, run, chunks)
            report.parts_written += 1
            parts.append({"file": name, "run": run.name})
            runs_state[run.name] = {"index": index, "parts": [name]}
            if run.name in known:
                report.runs_rearchived += 1
            else:
                report.runs_added += 1
    return experiment, parts, runs_state


def experiments(src: Path, report=None):
    """``[(source path, sub-dataset name or None)]``: None for one experiment, else one
    entry per experiment of the export root (a name changed for a clash noted in ``report``)."""
    from tbconvert.formats.tbdev import export_dir
    sources, is_root = export_dir.find_experiments(src)
    if not is_root:
        return [(src, None)]
    names = export_dir.experiment_names(sources, report)
    return [(source.path, name) for source, name in zip(sources, names, strict=True)]
