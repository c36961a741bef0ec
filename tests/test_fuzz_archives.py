"""A bounded, seeded run of the coverage-guided archive fuzzer (fuzz/fuzz_archives.py): any crash,
hang or traceback while reading a mutated Parquet or HDF5 archive fails the test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("atheris")


@pytest.mark.slow
def test_fuzz_archives_seeded_campaign(tmp_path):
    corpus = tmp_path / "corpus"
    p = subprocess.run(
        [sys.executable, str(ROOT / "fuzz" / "fuzz_archives.py"), str(corpus),
         "-runs=2000", "-max_total_time=240", "-timeout=30", "-rss_limit_mb=2048",
         "-seed=1",
         f"-artifact_prefix={tmp_path}/"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    log = p.stdout + p.stderr
    assert p.returncode == 0, log[-4000:]
    assert "Done " in log and "Traceback" not in log, log[-4000:]
    assert not list(tmp_path.glob("crash-*")) and not list(tmp_path.glob("timeout-*"))
