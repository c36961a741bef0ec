"""tbconvert as an installed copy starts: its modules compiled to bytecode before any timing.

pip compiles a wheel's modules when it installs them. The benches run tbconvert from this
source tree, whose bytecode is never written where Python is told not to write it
(``PYTHONDONTWRITEBYTECODE``, a read-only checkout): every command would then compile its
hundred-odd modules from source as it starts, about 40 ms here, which no installed copy does.
"""

from __future__ import annotations

import compileall
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tbconvert"


def compile_package() -> None:
    """Write the bytecode of every tbconvert module (``__pycache__``, ignored by git)."""
    if not compileall.compile_dir(str(PACKAGE), quiet=1):
        raise SystemExit(f"could not compile the modules of {PACKAGE}")
