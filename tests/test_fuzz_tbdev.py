"""Fuzzing the export reader: seeded mutations here, the coverage-guided harness (slow).

Both drive ``fuzz/fuzz_tbdev.py``'s harness: one part of a real export (a JSON
lines file, metadata.json, an npz, one npy member) is replaced and the whole
export read. Only a one-line :class:`TbconvertError` may escape.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from helpers import FUZZ, REPO, on_path

on_path(FUZZ)

import fuzz_tbdev  # noqa: E402
from limits import deadline  # noqa: E402

# Byte strings that reach far: deep nesting, out-of-range numbers, surrogates, bad headers.
TOKENS = [b"[" * 5000, b"{\"run\": " * 200, b"18446744073709551615", b"-9223372036854775809",
          b"\\ud800", b"NaN", b"1e999", b"\"tensors/../../x.npz\"", b"null", b"'shape': (True,)",
          b"\x93NUMPY\x01\x00\xff\xff", b"PK\x03\x04", b"\"run\":\"r\"", b"\n", b"\x00" * 64]


def mutate(seed: bytes, rng: np.random.Generator) -> bytes:
    data = bytearray(seed)
    for _ in range(int(rng.integers(1, 5))):
        op = int(rng.integers(0, 5))
        pos = int(rng.integers(1, max(2, len(data))))
        if op == 0 and len(data) > 1:                      # flip a bit
            data[pos % len(data)] ^= 1 << int(rng.integers(0, 8))
        elif op == 1:                                      # overwrite a stretch
            k = int(rng.integers(1, 32))
            data[pos:pos + k] = rng.bytes(k)
        elif op == 2:                                      # cut off
            del data[pos:]
        elif op == 3:                                      # insert a far-reaching token
            data[pos:pos] = TOKENS[int(rng.integers(0, len(TOKENS)))]
        else:                                              # repeat a stretch
            data[pos:pos] = data[pos:pos + int(rng.integers(1, 200))] * int(rng.integers(2, 20))
    return bytes(data)


def test_seeded_mutations_of_every_export_part(tmp_path):
    harness = fuzz_tbdev.Harness(tmp_path)
    seeds = harness.seeds()
    assert len(seeds) == len(fuzz_tbdev.PARTS)             # one per part of an export
    for seed in seeds:                                      # the unmutated export reads cleanly
        harness.run_one(seed)
    rng = np.random.default_rng(2024)
    for case in range(150):
        data = mutate(seeds[case % len(seeds)], rng)
        with deadline(10, f"case {case}"):
            try:
                harness.run_one(data)
            except Exception as exc:  # noqa: BLE001
                pytest.fail(f"case {case} ({fuzz_tbdev.PARTS[data[0] % 6]}): "
                            f"{type(exc).__name__}: {exc}")


@pytest.mark.slow
def test_coverage_guided_campaign_finds_no_crash(tmp_path):
    """8,000 inputs of atheris (about 20 s, seeded: the same inputs every time); any uncaught
    exception, hang or memory blow-up fails."""
    pytest.importorskip("atheris")
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, str(FUZZ / "fuzz_tbdev.py"), "-runs=8000", "-max_total_time=240",
         "-timeout=10", "-rss_limit_mb=2048", "-seed=1", f"-artifact_prefix={artifacts}/",
         str(tmp_path / "corpus")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    tail = proc.stderr[-3000:]
    assert proc.returncode == 0, tail
    assert not list(artifacts.iterdir()), tail
    runs = re.search(r"Done (\d+) runs", proc.stderr)
    assert runs and int(runs.group(1)) > 100, tail
