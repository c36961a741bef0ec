"""ruff, configured in pyproject.toml, finds nothing in the package, tests, bench and fuzz."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing():
    pytest.importorskip("ruff")
    import tbconvert
    config = ROOT / "pyproject.toml"
    package = Path(tbconvert.__file__).resolve().parent
    # From an installed copy the package is not under ROOT: check the installed one with
    # the project's configuration.
    paths = [str(package)] + [str(ROOT / d) for d in ("tests", "bench", "fuzz") if (ROOT / d).is_dir()]
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config", str(config),
                           *paths], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
