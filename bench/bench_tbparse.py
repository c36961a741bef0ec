"""Benchmark: ``tbconvert.tbparse.SummaryReader`` against tbparse, side by side.

For each writer form of ``bench/writers.py`` a logdir is written once; then
tbparse's ``SummaryReader(logdir, event_types={T}).T`` and ours (same call,
one changed import) each run in a fresh interpreter, which reports its wall
time (after the imports) and peak resident memory (VmHWM, imports included:
pandas alone is about 100 MiB, so the memory ratio only means something on
logdirs well above that). ``T`` is the table the form lands in
for tbparse (TF2 and Keras scalars, TF2 histograms and images are tensors).
Goal: at least 10x faster and at most half the memory.

Usage::

    python bench/bench_tbparse.py [--points 500000] [--forms pytorch,tf2,...] [--repeat 1] [--pivot]

tbparse must be installed (it is in the ``test`` extra). Legacy images need
TensorFlow in tbparse, so that form is timed for tbconvert only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import installed
import writers

# form -> (table, points scale: histograms and images are heavier per point)
FORMS = {
    "pytorch": ("scalars", 1.0),
    "tensorboardx": ("scalars", 1.0),
    "tf2": ("tensors", 1.0),
    "keras": ("tensors", 1.0),
    "tf1_merge_all": ("scalars", 1.0),
    "histo_legacy": ("histograms", 0.02),
    "histo_tf2": ("tensors", 0.1),
    "images_legacy": ("images", 0.02),
    "images_tf2": ("tensors", 0.1),
}

_CHILD = """
import sys, time, warnings, json
warnings.filterwarnings("ignore")
import pandas
if sys.argv[1] == "tbparse":
    from tbparse import SummaryReader
else:
    from tbconvert.tbparse import SummaryReader
table = sys.argv[3]
t0 = time.perf_counter()   # after the imports: both sides import pandas
pivot = sys.argv[4] == "pivot"
df = getattr(SummaryReader(sys.argv[2], event_types={table}, pivot=pivot), table)
elapsed = time.perf_counter() - t0
peak = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0]
print(json.dumps({"seconds": elapsed, "peak_mib": int(peak) / 1024, "rows": len(df)}))
"""


def run_child(which: str, logdir: Path, table: str, pivot: bool = False) -> dict | None:
    proc = subprocess.run([sys.executable, "-c", _CHILD, which, str(logdir), table,
                           "pivot" if pivot else "long"],
                          capture_output=True, text=True)
    if proc.returncode:
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def best(which: str, logdir: Path, table: str, repeat: int, pivot: bool = False) -> dict | None:
    results = [run_child(which, logdir, table, pivot) for _ in range(repeat)]
    if any(r is None for r in results):
        return None
    return min(results, key=lambda r: r["seconds"])


def main() -> None:
    installed.compile_package()   # commands start as an installed copy does
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=500_000)
    ap.add_argument("--forms", default=",".join(FORMS))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--pivot", action="store_true", help="wide tables (pivot=True)")
    args = ap.parse_args()
    print(f"load average before: {_load()}")
    print("| form | table | rows | tbparse s | tbconvert s | speed-up | tbparse MiB | "
          "tbconvert MiB | memory ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for form in args.forms.split(","):
        table, scale = FORMS[form]
        root = Path(tempfile.mkdtemp(prefix=f"bench-tbparse-{form}-"))
        try:
            writers.write_form(form, root / "logs", max(1, int(args.points * scale)))
            ours = best("tbconvert", root / "logs", table, args.repeat, args.pivot)
            theirs = best("tbparse", root / "logs", table, args.repeat, args.pivot)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        if ours is None:
            print(f"| {form} | {table} | failed | | | | | | |")
            continue
        if theirs is None:
            print(f"| {form} | {table} | {ours['rows']:,} | needs TensorFlow | "
                  f"{ours['seconds']:.2f} | – | – | {ours['peak_mib']:.0f} | – |")
            continue
        print(f"| {form} | {table} | {ours['rows']:,} | {theirs['seconds']:.2f} | "
              f"{ours['seconds']:.2f} | {theirs['seconds'] / ours['seconds']:.1f}× | "
              f"{theirs['peak_mib']:.0f} | {ours['peak_mib']:.0f} | "
              f"{ours['peak_mib'] / theirs['peak_mib']:.2f} |", flush=True)
    print(f"load average after: {_load()}")


def _load() -> str:
    """The 1, 5 and 15-minute load averages: times are only comparable on a quiet machine."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


if __name__ == "__main__":
    main()
