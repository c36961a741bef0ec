"""A full conversion against ``sync`` after 1% new data, side by side.

    python bench/bench_sync.py [--points 1000000] [--runs 10] [--new 0.01] [--active K]
                               [--repeat 3] [--dir DIR] [--rounds N]

The logdir holds ``--runs`` runs of scalars, half written as PyTorch writes them
(``simple_value``), half as TensorFlow 2 does (a DT_FLOAT tensor with its metadata),
byte for byte (``bench/writers.py``). Timed, each in a fresh process as a user runs it:

* ``convert logs/ full/ --to parquet``;
* the first ``sync logs/ archive/`` (everything is new);
* ``sync`` again after ``--new`` of the points were appended, spread over every run's
  event file (training went on; ``--active K``: over the first K runs only, the runs still
  training), and once more with nothing new.

The sync is also timed inside one Python process (``tbconvert.sync``), which leaves out
the interpreter's start-up, as rounds of ``tbconvert.sync_watch`` with ``jobs=1`` and
``jobs=0`` (workers kept from round to round, each taking a share of the runs), and as
``sync --watch 0.2`` (one long-lived process, a worker per further core): a round's
own duration as the process reports it on stderr, and the time from the end of an append
to the manifest's new generation (which includes waiting for the next round to start).
Rows give wall time and CPU time (user + system, of this process and of the processes it
waited for: a conversion's reading processes count). After the timings the dataset is
checked to hold exactly the rows of the full conversion. Prints a markdown table.

``--rounds N`` also times N rounds of ``tbconvert.sync_watch`` in a row, each after ``--new``
more points (a long ``sync --watch``), once with a run's small parts merged as they pile up
and once with merging turned off: the rounds' median (also of the last tenth: whether
rounds slow down as the watch goes on), mean and slowest, and the parts at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import installed
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import writers  # noqa: E402

from tbconvert.formats.tfevents import records  # noqa: E402

TAGS = writers.SCALAR_TAGS


def _library(i: int) -> str:
    return "pytorch" if i % 2 == 0 else "tf2"


def build(logdir: Path, runs: int, points: int) -> None:
    for i in range(runs):
        writers.scalar_run(logdir / f"run{i:02d}", _library(i), points // runs, seed=i)


def append(logdir: Path, runs: int, points: int, new: int, k: int = 0,
           active: int | None = None) -> None:
    """The ``k``-th append (from 0) of ``new`` points to a logdir built with ``points``,
    spread over its first ``active`` runs (all: None), steps going on where each run stopped."""
    active = active or runs
    steps = max(1, new // active // len(TAGS))
    first = points // runs // len(TAGS) + k * steps
    for i in range(active):
        path = next((logdir / f"run{i:02d}").glob("*tfevents*"))
        vals = np.random.default_rng(100 + i).random(steps * len(TAGS)).astype(np.float32)
        out = []
        for s in range(first, first + steps):
            wall = writers.WALL0 + 1 + s * 0.01
            for j, tag in enumerate(TAGS):
                v = vals[(s - first) * len(TAGS) + j]
                if _library(i) == "pytorch":
                    out.append(records.frame(writers.simple_value_event(s, wall, {tag: v})))
                else:
                    out.append(records.frame(writers.tf2_scalar_event(s, wall, tag, float(v))))
        with open(path, "ab") as fh:
            fh.write(b"".join(out))


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of ``fn()``."""
    t0, c0 = time.perf_counter(), _cpu()
    fn()
    return time.perf_counter() - t0, _cpu() - c0


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def cli(*args) -> tuple[float, float]:
    return timed(lambda: subprocess.run([sys.executable, "-m", "tbconvert", *map(str, args), "-q"],
                                        check=True, env=_env(), cwd=str(ROOT)))


def best(fn, repeat: int) -> tuple[float, float]:
    """The best wall time and the best CPU time of ``repeat`` calls of ``fn`` (each
    returning both)."""
    runs = [fn() for _ in range(repeat)]
    return min(w for w, _ in runs), min(c for _, c in runs)


def generation(dataset: Path) -> int:
    try:
        return json.loads((dataset / "_tbconvert.json").read_text())["sync"]["generation"]
    except (OSError, ValueError, KeyError):
        return -1


def archived_sizes(dataset: Path) -> dict | None:
    """Where the manifest notes each event file archived to (by run and name); None while
    it cannot be read (being replaced)."""
    try:
        runs = json.loads((dataset / "_tbconvert.json").read_text())["sync"]["runs"]
        return {(run, f["name"]): f["end"] for run, state in runs.items() for f in state["files"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def source_sizes(logs: Path) -> dict:
    return {(f.parent.name, f.name): f.stat().st_size for f in logs.glob("*/*tfevents*")}


def watch_rounds(logs: Path, dataset: Path, grow, repeat: int,
                 every: float = 0.2) -> tuple[list[float], list[float], float]:
    """``sync --watch EVERY`` following ``repeat`` appends (``grow()``): the rounds' own durations as the
    process reports them, the times from the end of each append to the new generation, and
    the process' CPU time over its whole life."""
    proc = subprocess.Popen([sys.executable, "-m", "tbconvert", "sync", str(logs), str(dataset),
                             "--watch", str(every)], env=_env(), cwd=str(ROOT),
                            stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()

    def wait_for(test, timeout=60.0):
        deadline = time.monotonic() + timeout
        while not test():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("sync --watch did not keep up: " + "".join(lines))
            time.sleep(0.005)

    marker = dataset / "_tbconvert.json"

    def committed(before: int) -> bool:
        # a stat per poll, the manifest read only once it was replaced: the poll stays light
        try:
            stamp = marker.stat().st_mtime_ns
        except OSError:
            return False
        if stamp == last[0]:
            return False
        last[0] = stamp
        return generation(dataset) > before

    last = [None]

    rounds, latencies = [], []
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        wait_for(lambda: any(re.search(r" round \d+ ", line) for line in lines))
        for _ in range(repeat):
            before = generation(dataset)
            seen = len(lines)
            grow()
            t0 = time.perf_counter()
            wait_for(lambda before=before: committed(before))
            latencies.append(time.perf_counter() - t0)
            mark = f"generation {before + 1}:"
            wait_for(lambda mark=mark, seen=seen: any(mark in line for line in lines[seen:]))
            line = next(line for line in lines[seen:] if mark in line)
            rounds.append(float(re.search(r"round \d+ \(([\d.]+) s\)", line).group(1)))
        # A round may begin while an append is still being written (some runs' new points
        # on disk, others' not yet) and leave the rest to the next round: the process is
        # stopped once the dataset holds every point, for the check against convert.
        wait_for(lambda: archived_sizes(dataset) == source_sizes(logs))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        reader.join(timeout=10)
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime
    return rounds, latencies, cpu


def many_rounds(base: Path, runs: int, points: int, new: int, count: int,
                merging: bool) -> tuple[list[float], int, int]:
    """``count`` rounds of ``tbconvert.sync_watch`` (``jobs=0``: a worker kept for the
    other core, as ``sync --watch`` keeps it), each after ``new`` more points (a fresh
    logdir and dataset): each round's duration, the dataset's parts at the end and the
    files in its directory (retired parts wait there two minutes). ``merging`` False turns
    the merging of small parts off (a fan-out no run reaches), to show what it costs and
    saves."""
    import tbconvert
    from tbconvert.incremental import compact
    logs, dataset = base / f"logs_rounds{int(merging)}", base / f"rounds{int(merging)}"
    build(logs, runs, points)
    tbconvert.sync(logs, dataset)
    saved = compact.FANOUT
    compact.FANOUT = saved if merging else 1 << 62
    appended = [0]

    def grow(_seconds=None) -> None:
        append(logs, runs, points, new, appended[0])
        appended[0] += 1

    seen: list = []
    try:
        grow()
        tbconvert.sync_watch(logs, dataset, 0, rounds=count, sleep=grow, on_round=seen.append,
                             jobs=0)
    finally:
        compact.FANOUT = saved
    assert all(r.error is None and r.skipped is None for r in seen)
    parts = len(json.loads((dataset / "_tbconvert.json").read_text())["parts"])
    files = len(os.listdir(dataset))
    assert rows(dataset) == rows(_converted(logs, base / f"full_rounds{int(merging)}"))
    return [r.seconds for r in seen], parts, files


def _converted(logs: Path, out: Path) -> Path:
    import tbconvert
    tbconvert.convert(logs, out, to_format="parquet")
    return out


def rows(path: Path) -> list:
    import pyarrow.dataset as pads
    cols = ["run", "tag", "step", "wall_time", "value", "hidden"]
    parts = json.loads((path / "_tbconvert.json").read_text())["parts"]
    table = pads.dataset([str(path / p["file"]) for p in parts], format="parquet").to_table(
        columns=cols)
    return sorted(zip(*(table.column(c).to_pylist() for c in cols), strict=True))


def main() -> None:
    installed.compile_package()   # commands start as an installed copy does
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--new", type=float, default=0.01)
    ap.add_argument("--active", type=int, default=None,
                    help="append the new points to this many runs only (default: every run)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--rounds", type=int, default=0,
                    help="also time this many syncs in a row, with and without merging parts")
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(dir=a.dir, prefix="bench-sync-"))
    try:
        logs = base / "logs"
        build(logs, a.runs, a.points)
        size = sum(f.stat().st_size for f in logs.rglob("*tfevents*"))
        new = int(a.points * a.new)
        active = a.active or a.runs
        appended = [0]      # appends so far, of ``new`` points each

        def grow():
            append(logs, a.runs, a.points, new, appended[0], a.active)
            appended[0] += 1

        def full():
            shutil.rmtree(base / "full", ignore_errors=True)
            return cli("convert", logs, base / "full", "--to", "parquet")
        t_full = best(full, a.repeat)

        def first_sync():
            shutil.rmtree(base / "archive", ignore_errors=True)
            return cli("sync", logs, base / "archive")
        t_first = best(first_sync, a.repeat)

        def sync_new():
            grow()
            return cli("sync", logs, base / "archive")
        t_sync = best(sync_new, a.repeat)
        t_same = best(lambda: cli("sync", logs, base / "archive"), a.repeat)

        import tbconvert

        def full_inproc(jobs):
            shutil.rmtree(base / "full", ignore_errors=True)
            return timed(lambda: tbconvert.convert(logs, base / "full", to_format="parquet",
                                                   jobs=jobs))
        full_inproc(1)       # the imports, once
        t_full_inproc_all = best(lambda: full_inproc(0), a.repeat)
        t_full_inproc_one = best(lambda: full_inproc(1), a.repeat)
        # the faster of the two is what the syncs are measured against
        t_full_inproc = min(t_full_inproc_all, t_full_inproc_one)

        def sync_inproc():
            grow()
            out = []
            t = timed(lambda: out.append(tbconvert.sync(logs, base / "archive")))
            assert out[0].runs_extended == active and out[0].runs_rearchived == 0, \
                out[0].summary()
            return t
        # twice as many tries: a few milliseconds are easily lost to a busy neighbour
        t_inproc = best(sync_inproc, 2 * a.repeat)
        t_inproc_same = best(lambda: timed(lambda: tbconvert.sync(logs, base / "archive")),
                             a.repeat)

        def library_rounds(jobs):
            """Rounds of ``tbconvert.sync_watch(jobs=...)``, each after an append (the
            first, which starts spawned workers, not counted)."""
            seen = []
            tbconvert.sync_watch(logs, base / "archive", 0, rounds=2 * a.repeat + 1,
                                 sleep=lambda _: grow(), on_round=seen.append, jobs=jobs)
            assert all(r.report is not None and r.report.runs_extended == active
                       for r in seen[1:]), [r.report.summary() for r in seen]
            return [r.seconds for r in seen[1:]]
        grow()
        lib_one = library_rounds(1)
        lib_all = library_rounds(0)

        rounds, latencies, watch_cpu = watch_rounds(logs, base / "archive", grow, 2 * a.repeat)
        grown = sum(f.stat().st_size for f in logs.rglob("*tfevents*"))

        full()
        assert rows(base / "archive") == rows(base / "full"), "the dataset differs from convert"
        mib = size / 2**20
        print("load average (1, 5, 15 min) at the end: "
              + ", ".join(f"{x:.1f}" for x in os.getloadavg()) + f"; {os.cpu_count()} cores\n")
        over = "every run" if active == a.runs else f"{active} of the runs"
        print(f"{a.points:,} points, {a.runs} runs ({mib:.1f} MiB); then {new:,} points "
              f"({100 * a.new:g}%, {(grown - size) / appended[0] / 2**10:.0f} KiB) appended "
              f"over {over}; best of {a.repeat} (in-process syncs and watch rounds: of "
              f"{2 * a.repeat}), commands in a fresh process each; CPU = user + system, "
              "the conversion's reading processes included\n")
        print("| what | wall s | vs. full convert | CPU s | vs. full convert |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for what, t, ref in (
                ("`convert logs/ full/ --to parquet`", t_full, t_full),
                ("first `sync` (everything new)", t_first, t_full),
                (f"`sync` after {100 * a.new:g}% new", t_sync, t_full),
                ("`sync` with nothing new", t_same, t_full),
                ("in one process (imports done): `tbconvert.convert(jobs=1)`",
                 t_full_inproc_one, t_full_inproc),
                ("in one process (imports done): `tbconvert.convert(jobs=0)`",
                 t_full_inproc_all, t_full_inproc),
                (f"in one process: `tbconvert.sync()` after {100 * a.new:g}% new", t_inproc,
                 t_full_inproc),
                ("in one process: `tbconvert.sync()` with nothing new", t_inproc_same,
                 t_full_inproc)):
            print(f"| {what} | {t[0]:.3f} | {100 * t[0] / ref[0]:.1f}% | {t[1]:.3f} | "
                  f"{100 * t[1] / ref[1]:.1f}% |")
        def median(xs):
            return sorted(xs)[len(xs) // 2]
        for jobs, got in ((1, lib_one), (0, lib_all)):
            r, m = min(got), median(got)
            print(f"| in one process: a round of `tbconvert.sync_watch(jobs={jobs})` after "
                  f"{100 * a.new:g}% new (median {m:.3f} s, {100 * m / t_full_inproc[0]:.1f}%) "
                  f"| {r:.3f} | {100 * r / t_full_inproc[0]:.1f}% | | |")
        r, m = min(rounds[1:]), median(rounds[1:])
        print(f"| `sync --watch 0.2`: a round after {100 * a.new:g}% new, its duration as the "
              f"process reports it (median {m:.3f} s, {100 * m / t_full[0]:.1f}%) | {r:.3f} | "
              f"{100 * r / t_full[0]:.1f}% (of the command; {100 * r / t_full_inproc[0]:.1f}% "
              "of the faster `tbconvert.convert()`) | | |")
        lat = min(latencies)
        print(f"| `sync --watch 0.2`: from the end of an append to the new generation "
              f"(waiting for the next round included) | {lat:.3f} | | | |")
        print(f"\n`tbconvert.sync_watch()` rounds: jobs=1 "
              f"{', '.join(f'{x:.3f}' for x in lib_one)} s; jobs=0 "
              f"{', '.join(f'{x:.3f}' for x in lib_all)} s")
        print(f"\n`sync --watch 0.2`: rounds {', '.join(f'{x:.3f}' for x in rounds)} s; "
              f"append to new generation {', '.join(f'{x:.3f}' for x in latencies)} s; the "
              f"process used {watch_cpu:.2f} s CPU over its life (start-up and idle rounds "
              "included)")
        print("\nthe synced dataset holds the same rows as the full conversion: yes")
        if a.rounds:
            print(f"\n{a.rounds} rounds of `tbconvert.sync_watch(jobs=0)` in a row, each "
                  f"after {new:,} new points:\n")
            print("| small parts | median s | median of the last tenth s | mean s | slowest s "
                  "| parts at the end | files in the dataset |")
            print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
            for merging in (False, True):
                times, parts, files = many_rounds(base, a.runs, a.points, new, a.rounds,
                                                  merging)
                print(f"| {'merged' if merging else 'kept (merging off)'} | "
                      f"{median(times):.4f} | {median(times[-max(1, len(times) // 10):]):.4f} "
                      f"| {sum(times) / len(times):.4f} | {max(times):.3f} | {parts} "
                      f"| {files} |")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
