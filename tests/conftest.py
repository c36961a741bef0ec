import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

FIXTURES = HERE.parent / "fixtures"
LOGDIRS = ["torch_logdir", "tensorboardx_logdir", "tf2_logdir"]


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES
