"""Progress on a terminal: a bar with bytes done of a total, a rate and time left, from
about the first second; nothing when stderr is not a terminal or with ``-q``."""

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import textwrap
import time
from pathlib import Path

import pytest
from helpers import CLI_CWD, cli_env, counting_progress
from test_jobs import scalar_logdir

from tbconvert.cli.ui import UI

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120", "TERM": "xterm"}


@pytest.fixture(scope="module")
def slow_logdir(tmp_path_factory):
    """About 5 s of work on a quiet machine of this kind, in one run (the worst case before):
    long enough that the bar must show whatever the load."""
    return scalar_logdir(tmp_path_factory.mktemp("progress") / "logs", runs=1, points=3_000_000,
                         tags=2)


def _on_a_terminal(args, seconds, size=(30, 120)):
    """Run the CLI with stderr on a pseudo-terminal of ``size`` (rows, columns); what it drew
    in ``seconds``, and when a bar first showed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", *size, 0, 0))
    p = subprocess.Popen([sys.executable, "-m", "tbconvert", *args], cwd=ROOT, env=ENV,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    start, first, text = time.monotonic(), None, b""
    try:
        while time.monotonic() - start < seconds:
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:
                    break
                if not data:
                    break
                text += data
                if first is None and b"/s" in text:
                    first = time.monotonic() - start
            elif p.poll() is not None:
                break
    finally:
        if p.poll() is None:
            p.terminate()
        p.wait(timeout=60)
        os.close(master)
    return text.decode("utf-8", "replace"), first


@pytest.mark.slow
def test_bar_with_total_and_rate_appears_early(slow_logdir, tmp_path):
    text, first = _on_a_terminal(["convert", str(slow_logdir), str(tmp_path / "o.parquet"),
                                  "--jobs", "1"], seconds=120)
    # the interpreter's start-up counts too, and this machine is shared: allow it a little
    assert first is not None and first < 4, (first, text[-300:])
    from tqdm import tqdm
    total = tqdm.format_sizeof(sum(p.stat().st_size for p in slow_logdir.rglob("*") if p.is_file()),
                               divisor=1024)
    bars = [line for line in re.split(r"[\r\n]", text) if "/s" in line]
    assert all("converting" in b and f"/{total}" in b for b in bars), bars[-3:][-3:]  # done/total
    # once work is done, a rate and the time left
    assert any(re.search(r"\d[kMG]?B/s", b) and re.search(r"<\d\d:\d\d", b) for b in bars), bars[-3:]


@pytest.mark.slow
def test_a_terminal_that_reports_no_size_still_gets_a_bar(slow_logdir, tmp_path):
    # (a bare pseudo-terminal: `script` run from a pipe, `docker run -t` in some setups)
    text, first = _on_a_terminal(["convert", str(slow_logdir), str(tmp_path / "o.parquet"),
                                  "--jobs", "1"], seconds=120, size=(0, 0))
    assert first is not None and "converting" in text, text[-300:]


@pytest.mark.slow
def test_silent_on_a_pipe_and_with_quiet(slow_logdir, tmp_path):
    p = subprocess.run([sys.executable, "-m", "tbconvert", "convert", str(slow_logdir),
                        str(tmp_path / "o.parquet"), "--jobs", "1"],
                       cwd=ROOT, env=ENV, capture_output=True, timeout=300)
    assert p.returncode == 0 and p.stderr == b"", p.stderr
    text, first = _on_a_terminal(["convert", str(slow_logdir), str(tmp_path / "q.parquet"),
                                  "--jobs", "1", "-q"], seconds=60)
    assert text == "" and first is None


def test_progress_counts_every_byte_once(tmp_path, monkeypatch):
    """Reading counts half of a run's bytes, writing the other half; the sum is the total."""
    import tbconvert
    from tbconvert.formats.tfevents import assemble
    monkeypatch.setattr(assemble, "CHUNK_POINTS", 1000)
    src = scalar_logdir(tmp_path / "logs", runs=3, points=5000)
    progress = counting_progress()
    tbconvert.convert(src, tmp_path / "o.parquet", progress=progress)
    size = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
    assert progress.total == size and progress.done == size
    assert progress.calls >= 3 * 2


def test_ui_draws_nothing_off_a_terminal():
    class Pipe:
        def isatty(self):
            return False
    assert UI(stream=Pipe()).progress() is None


FORKED_BAR = textwrap.dedent('''
    import io, json, os, threading
    from tbconvert import workers
    from tbconvert.cli.ui import UI

    class Tty(io.StringIO):
        def isatty(self):
            return True

    ui = UI(stream=Tty())
    ui.progress().start(100)
    lock = ui._bar.get_lock()
    for _ in range(3):          # a worker forked per core, and again after one died
        with workers._forking_workers():
            pid = os.fork()
            if pid == 0:
                os._exit(0)
        os.waitpid(pid, 0)
    lock.acquire()
    other = {}

    def draw():             # the bar's clock drawing while the main thread holds the lock
        other["got"] = lock.acquire(timeout=0.5)
        if other["got"]:
            lock.release()
    t = threading.Thread(target=draw)
    t.start()
    t.join()
    try:
        lock.release()
        released = True
    except AssertionError:
        released = False
    print(json.dumps({"other_got_it": other["got"], "released": released}))
''')


def test_the_bar_stays_one_lock_after_workers_are_forked(tmp_path):
    """The bar's lock is held over each fork of workers and released in the worker and here.
    A lock shared between processes (tqdm's default holds a semaphore) would be released
    twice, once by each: two threads could then draw at once, and the bar's clock and the
    leading thread ended waiting for each other for ever (a conversion on a terminal hung)."""
    script = tmp_path / "forked_bar.py"
    script.write_text(FORKED_BAR)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=CLI_CWD, env=cli_env(), timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"other_got_it": False, "released": True}
