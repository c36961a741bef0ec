"""Peak memory of one conversion, measured in a fresh process (shared by the benchmarks)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# VmHWM of the child, not ru_maxrss: on Linux a child's ru_maxrss starts from the parent's
# high-water mark at fork and survives execve, so it would report this (large) process.
_CHILD = """
import sys, tbconvert
tbconvert.convert(sys.argv[1], sys.argv[2], to_format=sys.argv[3] if len(sys.argv) > 3 else None)
print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM')][0])
"""


def peak_rss_mib(src: Path, dst: Path, to_format: str | None = None) -> float:
    """Peak resident memory (MiB) of ``tbconvert.convert(src, dst)`` in a new interpreter."""
    args = [sys.executable, "-c", _CHILD, str(src), str(dst)] + ([to_format] if to_format else [])
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return int(out.strip().splitlines()[-1]) / 1024  # KiB on Linux
