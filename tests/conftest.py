import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import pytest

# The test modules import their shared helpers (``helpers``, ``oracle``, ``limits``...) by
# name, also when they run from a copy of ``tests/`` against the installed package.
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from helpers import FIXTURES  # noqa: E402

# The tests send Ctrl-C (SIGINT) to this process and to the commands it starts, as a terminal
# does. A shell starts a background job (``.ci/run &``, ``nohup``) with SIGINT ignored, which
# Python then leaves ignored and every child inherits: Ctrl-C would do nothing, and the tests
# of what it does would fail for how they were launched. Set it up as a terminal has it.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session", autouse=True)
def _temporary_files_kept_together(tmp_path_factory):
    """Every temporary file that the tests' processes make goes into one directory, removed
    when the tests end: processes killed on purpose (a sync, an upload, a worker) leave
    theirs behind, and so would every run of the tests. pytest's own directories (each
    test's ``tmp_path``) stay where pytest keeps them."""
    tmp_path_factory.getbasetemp()
    saved_env, saved_dir = os.environ.get("TMPDIR"), tempfile.tempdir
    session = Path(tempfile.mkdtemp(prefix="tbconvert-tests-"))
    os.environ["TMPDIR"] = str(session)         # the commands and workers the tests start
    tempfile.tempdir = str(session)             # this process
    try:
        yield session
    finally:
        tempfile.tempdir = saved_dir
        if saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_env
        shutil.rmtree(session, ignore_errors=True)
