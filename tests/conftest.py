import sys
from pathlib import Path

import pytest

# The test modules import their shared helpers (``helpers``, ``oracle``, ``limits``...) by
# name, also when they run from a copy of ``tests/`` against the installed package.
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from helpers import FIXTURES  # noqa: E402


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES
