"""Every kind of report issue, with what it means and whether it costs data.

:meth:`tbconvert.report.Report.add` refuses a kind that is not listed here, so
the list stays complete: users can rely on these identifiers (in ``--json``
output and in the ``Report`` the API returns), and ``docs/robustness.md``
shows the same table (``tests/test_kinds.py`` checks both).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Kind:
    """``lost``: True when every issue of this kind costs data, False when none does,
    None when it depends on the case (each issue says so in its own ``lost``).
    ``counts``: what an issue's ``count`` counts (``"point"``, ``"blob"``...: one issue may
    concern many), None when each issue is one occurrence."""

    meaning: str
    lost: bool | None
    counts: str | None = None


_LOST, _KEPT, _EITHER = True, False, None

KINDS: dict[str, Kind] = {
    "bad_histogram": Kind("histogram points that are not [k, 3] numeric tensors are left out of "
                          "the histogram table", _LOST, "point"),
    "bad_hparams": Kind("hparams plugin data that does not parse; that trial information is not "
                        "in the table", _LOST),
    "bad_line": Kind("a line of an export's JSON files that cannot be read is skipped", _LOST),
    "bad_metadata": Kind("an export's metadata.json is unreadable (the experiment facts are lost), "
                         "holds a field of the wrong type (kept as text) or a key nested too "
                         "deeply for an archive (left out)", _EITHER),
    "bad_path": Kind("a blob or tensor file path in an export is too long or unusable; treated "
                     "as missing", _LOST),
    "bad_sidecar": Kind("the experiment facts file beside event files is unreadable (ignored), "
                        "holds a field of the wrong type (kept as text) or a key nested too "
                        "deeply for an archive (left out)", _EITHER),
    "experiment_facts_not_kept": Kind("directories below a logdir hold the experiment facts of "
                                      "several experiments (or of some of the runs read); an "
                                      "output of them all keeps none", _LOST),
    "column_renamed": Kind("a table column was renamed so that it does not clash with another",
                           _KEPT),
    "conflicting_series": Kind("an export names one series in two files of different data "
                               "classes; the later line is skipped", _LOST, "point"),
    "corrupt_record": Kind("an event-file record whose checksums fail, which is not an Event, "
                           "or whose value cannot be decoded; it is skipped", _LOST),
    "corrupt_tensor": Kind("points of an export tensor file that cannot be decoded are lost",
                           _LOST, "point"),
    "corrupt_tensor_file": Kind("an export tensor file (.npz) that cannot be read; its points "
                                "are lost", _LOST, "point"),
    "damaged_archive": Kind("an archive whose checksum does not match was read anyway "
                            "(--ignore-checksum); parts may be missing or wrong", _LOST),
    "damaged_points": Kind("damaged rows of one series in a Parquet archive are skipped", _LOST,
                           "point"),
    "damaged_record": Kind("a run-level event of an archive (session log, log message) that "
                           "does not decode, or of an unknown kind, is skipped", _LOST),
    "damaged_row_group": Kind("a damaged or unrecorded Parquet row group is skipped", _LOST,
                              "point"),
    "damaged_run": Kind("a damaged run of an HDF5 archive is skipped", _LOST),
    "damaged_series": Kind("a damaged series of an HDF5 archive loses its points", _LOST, "point"),
    "dangling_symlink": Kind("a symbolic link that leads nowhere (its target missing or out of "
                             "reach, or links in a circle) is skipped, as TensorBoard skips it",
                             _LOST),
    "data_class_changed": Kind("an export series whose metadata names another data class than "
                               "its file is read as its file's class", _KEPT),
    "duplicate_step_in_wide": Kind("points sharing a step: the wide table keeps the last one",
                                   _LOST, "point"),
    "empty_histogram": Kind("histogram points of no buckets have no row in the histogram table",
                            _LOST, "point"),
    "empty_text": Kind("text points of no cells (a shape with a 0 dimension) have no row in the "
                       "text table and no file from tbconvert media", _LOST, "point"),
    "empty_series_not_listed": Kind("series without points are not written to event files "
                                    "(TensorBoard lists no tag without data)", _KEPT, "series"),
    "event_file_named_directory": Kind("a directory named like an event file is read as a "
                                       "directory, its event files a run of their own "
                                       "(TensorBoard shows nothing of it, nor of the event "
                                       "files sorted after it in the run that holds it); "
                                       "written as event files, its name is spelt tf_events",
                                       _KEPT),
    "experiment_facts_dropped": Kind("the destination cannot hold the experiment's name, "
                                     "description and times", _LOST),
    "experiment_facts_sidecar": Kind("the experiment's name, description and times are kept in "
                                     "a file beside the event files", _KEPT),
    "experiment_id_not_kept": Kind("an export keeps the experiment id only in its directory "
                                   "name, which the destination does not carry", _KEPT),
    "experiment_renamed": Kind("an experiment of an export root written under another name "
                               "than its id or folder name: an experiment before it has it, "
                               "or it is not a safe path", _KEPT),
    "experiment_not_in_source": Kind("sync: an experiment gone from the export root keeps its "
                                     "dataset as it was", _KEPT),
    "export_read_whole": Kind("sync: an export's files changed since the last sync, so its runs were "
                              "written again", _KEPT),
    "float64_scalars": Kind("export scalars that are not all float32-exact are kept as float64",
                            _KEPT),
    "hidden_points_left_out": Kind("points TensorBoard's restart rule hides are left out "
                                   "(--restarts keep-all writes them)", _KEPT, "point"),
    "hidden_points_not_shown": Kind("points TensorBoard's restart rule hides are not charted by "
                                    "the web view (they are in its Parquet file)", _KEPT, "point"),
    "metric_from_hidden_point": Kind("with --restarts keep-all, an hparams metric's value is its "
                                     "last point even where TensorBoard's restart rule hides it",
                                     _KEPT),
    "inexact_value": Kind("integers beyond 2**53 are rounded to the nearest float64 (a table's "
                          "float column; an export's scalar values, which are float64)",
                          _LOST, "value"),
    "leftover_output_skipped": Kind("an incomplete output of tbconvert in the source (a hidden "
                                    ".NAME.tbconvert-tmp-... entry, being written or left by a "
                                    "killed conversion) is not read as runs", _KEPT),
    "lost_blob_not_shown": Kind("blobs the source lost are not shown by the web view", _KEPT,
                                "blob"),
    "media_not_shown": Kind("media of a type the web view does not show (they are in its "
                            "Parquet file)", _KEPT, "blob"),
    "metadata_differs": Kind("an export line's summary metadata differs from its series' first "
                             "line; the first line's is kept", _LOST),
    "missing_blob": Kind("blobs the source lost (null, missing or unreadable blob files); kept "
                         "as holes where the destination can hold them", _LOST, "blob"),
    "missing_blob_written_empty": Kind("lost blobs written to event files as empty blobs, so "
                                       "the others keep their positions", _LOST, "blob"),
    "missing_tensors": Kind("an export tensor file that is missing or cannot be opened; its "
                            "points are lost", _LOST, "point"),
    "mixed_hparam_types": Kind("an hparam with values of several types; its column holds text",
                               _KEPT),
    "name_clash": Kind("an extracted media file's natural name was taken; written under another",
                       _KEPT),
    "name_escaped": Kind("a run or tag name that is not valid UTF-8 is stored with its odd bytes "
                         "escaped (%XX)", _KEPT),
    "name_made_safe": Kind("an extracted media file's path was escaped or shortened to be safe",
                           _KEPT),
    "not_a_regular_file": Kind("a pipe, device or socket where a file was expected is skipped",
                               _LOST),
    "not_an_event_file": Kind("a file named like an event file holds no valid record; skipped",
                              _LOST),
    "nan_payload_dropped": Kind("NaN values with a sign or payload of their own are written as "
                                "the plain NaN where the destination spells NaN as text (an "
                                "export's JSON)", _LOST, "value"),
    "not_in_table": Kind("points that are not scalars are not written to the CSV table", _LOST,
                         "point"),
    "not_in_web_view": Kind("points the web view does not chart (they are in its Parquet file)",
                            _KEPT, "point"),
    "not_media": Kind("points that are not images, audio or text are not extracted", _KEPT,
                      "point"),
    "not_numeric_tensor": Kind("string or complex tensors are left out of the tensor table",
                               _LOST, "point"),
    "plugin_files_not_read": Kind("files that TensorBoard's plugins read beside event files "
                                  "(a run's plugins/NAME/ directory, such as the profiler's "
                                  "traces; the projector's projector_config.pbtxt; the "
                                  "PyTorch profiler's *.pt.trace.json) are not "
                                  "event data: tbconvert does not read them, and no output but "
                                  "event files holds them (also: one such file that could not "
                                  "be copied into event files)", _KEPT),
    "parts_not_listed": Kind("a Parquet dataset's directory holds part files its "
                             "_tbconvert.json does not list: tbconvert does not read them, "
                             "readers of every file do", _KEPT, "file"),
    "plugin_files_compared": Kind("verify compared the files that TensorBoard's plugins read "
                                  "beside the event files of two event-file logdirs, byte for "
                                  "byte (those that differ are differences)", _KEPT, "file"),
    "plugin_files_copied": Kind("files that TensorBoard's plugins read beside event files were "
                                "copied byte for byte to the same place in the event-file "
                                "output (under the run's new name, where it changed)", _KEPT,
                                "file"),
    "remote_key_skipped": Kind("an object-store key that is not a safe path, or clashes with "
                               "another, is skipped", _LOST),
    "restart_markers_not_written": Kind("restart markers not written to event files or an "
                                        "export; the points they hid, if any, are left out "
                                        "instead (written and shown with --restarts keep-all)",
                                        _KEPT, "marker"),
    "parts_not_merged": Kind("sync: a run's last parts could not be merged into one (a part "
                             "could not be read whole); they are kept as they are, and the next "
                             "sync reads the run whole again", _KEPT),
    "run_name_taken": Kind("sync: a run whose name is stored as another run's (an odd name "
                           "escaped into a name that exists) is left out of the dataset",
                           _LOST),
    "run_read_whole": Kind("sync: a run was read whole again instead of only its new bytes; the "
                           "message says why (a file truncated, replaced or rewritten, a restart "
                           "hiding archived points...)", _KEPT),
    "graph_not_parsable": Kind("a run graph whose bytes do not parse as a GraphDef: written "
                               "as the source holds it, but TensorBoard cannot show it", _KEPT),
    "run_records_dropped": Kind("run-level events (meta graphs, session logs) the destination "
                                "has no place for", _LOST, "run-level event"),
    "run_removed": Kind("sync: a run gone from the source was taken out of the dataset", _KEPT),
    "run_renamed": Kind("a run written or read under another name (unsafe path, Windows "
                        "separators)", _KEPT),
    "run_start_time_replaced": Kind("a run's non-finite start time is written as a finite "
                                    "one (the earliest time written; TensorBoard's fast "
                                    "loader stops at a NaN wall time)", _LOST),
    "run_start_time_dropped": Kind("a run's start time other than its first point's has no "
                                   "place in a TensorBoard.dev export; read back, the run "
                                   "starts at its first point", _KEPT),
    "run_without_data_left_out": Kind("a run holding no data a TensorBoard.dev export can hold "
                                      "is left out of it (an export knows a run only by its "
                                      "series): its name and start time are not kept", _KEPT),
    "scalar_dtypes_differ": Kind("verify: a series' scalars have other dtypes in the two sources "
                                 "(int64 and float64, say); values are compared exactly, the "
                                 "dtype alone is no difference", _KEPT),
    "scalar_rounded": Kind("integer scalars beyond 2**53 that a double cannot hold are rounded "
                           "to an export's doubles", _LOST, "value"),
    "histograms_as_tensors": Kind("histogram points written in the tensor form both "
                                  "TensorBoard loaders show alike; TensorBoard's default loader "
                                  "showed legacy histo values with every bucket, as float64 "
                                  "rows", _KEPT, "point"),
    "scalar_rounded_to_float32": Kind("scalars float32 cannot hold exactly (float64 values such "
                                      "as 16777217.0 or 0.1, wide integers) are rounded to "
                                      "float32 in event files, the only scalar type both "
                                      "TensorBoard loaders show", _LOST, "value"),
    "selection_matched_nothing": Kind("a runs or tags regex that matched none of the source's "
                                      "runs or tags: the result holds nothing of it", _KEPT),
    "stale_lock_taken_over": Kind("sync: a lock left by a sync that died (or by --break-lock) was "
                                  "taken over", _KEPT),
    "steps_not_increasing": Kind("points of a tag followed by a point at the same or an earlier "
                                 "step (as from a run resumed without a restart marker that "
                                 "TensorBoard acts on, or two writers in one run) are all written "
                                 "to event files and --load_fast=false shows them, but "
                                 "TensorBoard's default loader keeps one point per step, a point "
                                 "dropping every earlier one at its step or after", _KEPT,
                                 "point"),
    "steps_rounded_in_view": Kind("steps of 2**53 or more are charted rounded by the web view",
                                  _KEPT),
    "string_nul_stripped": Kind("strings ending in NUL bytes lose them in an export's byte "
                                "arrays", _LOST, "string"),
    "symlink_loop": Kind("a link back to a directory above it is not followed: its runs are read "
                         "once, under the shorter path (a conversion lacks the ever deeper "
                         "copies TensorBoard lists; tbparse would never end)", _EITHER),
    "symlink_not_followed": Kind("a link to a directory already read under 64 other paths is not "
                                 "followed (TensorBoard would show its runs under this path too)",
                                 _LOST),
    "tags_without_points_kept": Kind("tags whose points are all hidden are kept listed in event "
                                     "files", _KEPT, "tag"),
    "tensor_count_mismatch": Kind("an export tensor file holds another number of tensors than "
                                  "its series has points; the points are lost", _LOST, "point"),
    "tensor_dtype_changed": Kind("tensors of a type numpy lacks are stored in an export as their "
                                 "unsigned storage integers", _LOST, "tensor"),
    "tensor_file_renamed": Kind("an export tensor file written under another name than the "
                                "exporter's", _KEPT),
    "text_escaped": Kind("text no file format can store (lone surrogates, bad UTF-8) is kept "
                         "percent-escaped (a lone surrogate as its UTF-8 bytes, %ED%A0%80)", _KEPT),
    "text_not_utf8": Kind("text values that are not UTF-8 hold U+FFFD in a table", _LOST),
    "truncated_line": Kind("an export's last line is cut off; the series on it is lost", _LOST),
    "truncated_record": Kind("an event file's last record is cut off; it is skipped", _LOST),
    "undecodable_tensor": Kind("a tensor value that cannot be decoded is kept as raw bytes",
                               _KEPT),
    "value_without_data": Kind("a summary value that holds metadata but no data (no tensor "
                               "and no legacy value) is skipped; TensorBoard's default loader "
                               "shows it as an empty point, --load_fast=false lists its tag "
                               "without points", _LOST),
    "unreadable_directory": Kind("a directory that cannot be read is skipped", _LOST),
    "unreadable_file": Kind("a file that cannot be read (or read again) is skipped", _LOST),
    "unreadable_run": Kind("a run that cannot be read is skipped; the other runs are read",
                           _LOST),
    "unsafe_path": Kind("a path in an export that is absolute, has '..' parts or points outside "
                        "it is treated as missing",
                        _LOST),
    "unsupported_series": Kind("series the destination cannot hold are left out", _LOST, "point"),
    "wall_time_replaced": Kind("non-finite wall times are written as the run's start time",
                               _LOST, "point"),
}


def register(kind: str, meaning: str, lost: bool | None, counts: str | None = None) -> None:
    """Catalogue the kind of a format that lives outside tbconvert (see docs/architecture.md)."""
    if kind in KINDS:
        raise ValueError(f"report kind {kind!r} is already catalogued")
    KINDS[kind] = Kind(meaning, lost, counts)


def unregister(kind: str) -> None:
    """Take back a kind :func:`register` added."""
    del KINDS[kind]


def check(kind: str, lost: bool) -> None:
    """Refuse a kind missing from :data:`KINDS`, or a ``lost`` that contradicts it: both are
    mistakes in tbconvert, not in its input."""
    entry = KINDS.get(kind)
    if entry is None:
        raise ValueError(f"unknown report kind {kind!r}: add it to tbconvert.kinds.KINDS")
    if entry.lost is not None and entry.lost != lost:
        raise ValueError(f"report kind {kind!r} is catalogued with lost={entry.lost}, "
                         f"not lost={lost}")


def markdown_table() -> str:
    """The catalogue as the Markdown table ``docs/robustness.md`` shows."""
    costs = {True: "yes", False: "no", None: "depends"}
    lines = ["| kind | loses data | meaning |", "| --- | --- | --- |"]
    lines += [f"| `{name}` | {costs[k.lost]} | {k.meaning} |" for name, k in sorted(KINDS.items())]
    return "\n".join(lines) + "\n"
