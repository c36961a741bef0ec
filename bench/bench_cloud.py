"""Requests, bytes and time of conversions from and to an S3-compatible server on loopback.

    python bench/bench_cloud.py [--runs 8] [--points 200000] [--tmp DIR]

Starts moto's server on 127.0.0.1 behind the tests' recording proxy (tests/cloud_server.py),
uploads a scalar logdir of ``--runs`` event files, and prints a markdown table: for each
conversion, the requests by kind, bytes each way, wall time, and the same conversion with
local paths. Needs the ``test`` extra (moto, s3fs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import installed  # noqa: E402
from bench_archives import make_logdir  # noqa: E402
from cloud_server import Proxy, start_moto, stop  # noqa: E402


def kinds(reqs) -> Counter:
    c = Counter()
    for r in reqs:
        if r.method == "GET" and "list-type" in r.query:
            c["list"] += 1
        elif r.method == "GET":
            c["get"] += 1
        else:
            c[r.method.lower()] += 1
    return c


def main() -> None:
    installed.compile_package()   # commands start as an installed copy does
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--points", type=int, default=200_000)
    ap.add_argument("--tmp", default=None)
    args = ap.parse_args()

    import s3fs

    import tbconvert

    tmp = Path(tempfile.mkdtemp(dir=args.tmp, prefix="bench-cloud-"))
    proc, port = start_moto()
    proxy = Proxy(port)
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
                      AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=proxy.url)
    try:
        logdir = tmp / "logs"
        make_logdir(logdir, args.runs, args.points)
        files = [p for p in logdir.rglob("*") if p.is_file()]
        size = sum(p.stat().st_size for p in files)
        fs = s3fs.S3FileSystem(endpoint_url=proxy.url, skip_instance_cache=True)
        fs.mkdir("bench")
        fs.put(str(logdir), "bench/logs", recursive=True)

        rows = []

        def measure(label, src, dst, local_src, local_dst, **kw):
            for p in (local_dst,):
                shutil.rmtree(p, ignore_errors=True) if Path(p).is_dir() else \
                    Path(p).unlink(missing_ok=True)
            t = time.perf_counter()
            tbconvert.convert(local_src, local_dst, **kw)
            local_s = time.perf_counter() - t
            proxy.clear()
            t = time.perf_counter()
            tbconvert.convert(src, dst, force=True, **kw)
            remote_s = time.perf_counter() - t
            reqs = proxy.requests("bench")
            c = kinds(reqs)
            by_kind = ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
            rows.append((label, sum(c.values()), by_kind,
                         sum(r.received for r in reqs) / 2**20, sum(r.sent for r in reqs) / 2**20,
                         remote_s, local_s))

        measure("s3 logdir → local Parquet", "s3://bench/logs", tmp / "a.parquet",
                logdir, tmp / "b.parquet")
        measure("local logdir → s3 Parquet file", logdir, "s3://bench/out.parquet",
                logdir, tmp / "c.parquet")
        measure("s3 Parquet → s3 event files", "s3://bench/out.parquet", "s3://bench/rebuilt",
                tmp / "c.parquet", tmp / "rebuilt", to_format="tfevents")

        print(f"{args.runs} event files, {args.runs} × {args.points:,} scalar points, "
              f"{size / 2**20:.1f} MiB; moto {__import__('moto').__version__} on loopback "
              "behind a recording proxy\n")
        print("| conversion | requests | by kind | MiB down | MiB up | time s3 (s) "
              "| time local (s) |")
        print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
        for label, n, by, down, up, rs, ls in rows:
            print(f"| {label} | {n} | {by} | {down:.1f} | {up:.1f} | {rs:.2f} | {ls:.2f} |")
    finally:
        proxy.close()
        stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
