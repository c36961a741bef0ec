"""Peak memory of ``tbconvert sync`` on a dataset of many runs grows little per run.

The dataset is made the quick way: one run synced, then copied 20,000 times (its event
file and part hard-linked, its manifest entry repeated), which is the dataset a first sync
of those runs writes, without the minutes that takes.
"""

import json
import os
from pathlib import Path

import numpy as np
import pytest
from helpers import peak_mib

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not Path("/proc/self/status").is_file(),
                                 reason="peak memory is read from /proc")]

RUNS = 20_000
# Each run's state in the manifest, parsed as dicts and held whole, took about 7 KB a run
# (145 MiB above a sync of one run, here); read a run at a time, about 2.5 KB.
MOST_KIB_PER_RUN = 4


def _many_runs(tmp_path: Path, runs: int) -> tuple[Path, Path]:
    import tbconvert
    from tbconvert.api import open_writer
    from tbconvert.formats.parquet import MARKER_DIGEST, MARKER_FILE, marker_digest
    from tbconvert.model import DataClass, Metadata, Run, ScalarSeries
    src, dst = tmp_path / "logs", tmp_path / "archive"
    one = tmp_path / "one"

    def chunks():
        for tag in ("loss", "accuracy", "lr", "grad_norm"):
            md = Metadata("scalars", b"", tag, "", DataClass.SCALAR)
            steps = np.arange(2, dtype=np.int64)
            yield ScalarSeries(run="r", tag=tag, metadata=md, steps=steps,
                               wall_times=1.7e9 + steps, hidden=None,
                               values=np.ones(2, np.float32))
    with open_writer(one, format="tfevents") as w:
        w.write_run(Run("r", 1.7e9), chunks())
    [event_file] = [p for p in one.rglob("*") if p.is_file()]
    # the run as sync sees it: a directory of the logdir (hard links keep size and time)
    (src / "trial_00000").mkdir(parents=True)
    os.link(event_file, src / "trial_00000" / event_file.name)
    tbconvert.sync(src, dst)
    marker = json.loads((dst / MARKER_FILE).read_bytes())
    [part] = [p["file"] for p in marker["parts"]]
    entry = marker["sync"]["runs"]["trial_00000"]
    states, parts = {}, []
    for i in range(1, runs):
        name = f"trial_{i:05d}"
        (src / name).mkdir()
        os.link(event_file, src / name / event_file.name)
        file = part.replace("00000-trial_00000", f"{i:05d}-{name}")
        os.link(dst / part, dst / file)
        states[name] = dict(entry, index=i, parts=[file])
        parts.append({"file": file, "run": name})
    marker["parts"] += parts
    marker["sync"]["runs"].update(states)
    marker.pop(MARKER_DIGEST)
    marker[MARKER_DIGEST] = marker_digest(marker)
    (dst / MARKER_FILE).write_text(json.dumps(marker, separators=(",", ":")))
    return src, dst


def _last_record(data: bytes) -> bytes:
    start = pos = 0
    while pos < len(data):      # (a record: its length in 8 bytes, 4 of CRC, the data, 4)
        start, pos = pos, pos + 16 + int.from_bytes(data[pos:pos + 8], "little")
    return data[start:]


def test_a_sync_of_many_runs_holds_little_per_run(tmp_path):
    small_src, small_dst = _many_runs(tmp_path / "small", 2)
    src, dst = _many_runs(tmp_path / "many", RUNS)
    # nothing new: the manifest is read, the runs' files checked
    base = peak_mib("sync", small_src, small_dst)
    peak = peak_mib("sync", src, dst)
    assert (peak - base) * 1024 / RUNS <= MOST_KIB_PER_RUN, f"{base} -> {peak} MiB"
    # one run grew: the full sync, which writes a new manifest
    for logdir in (small_src, src):
        [grown] = (logdir / "trial_00001").iterdir()
        data = grown.read_bytes()
        grown.unlink()          # (its own file now: the others stay as they were)
        grown.write_bytes(data + _last_record(data))
    base = peak_mib("sync", small_src, small_dst)
    peak = peak_mib("sync", src, dst)
    assert (peak - base) * 1024 / RUNS <= MOST_KIB_PER_RUN, f"{base} -> {peak} MiB"
