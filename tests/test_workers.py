"""How worker processes start and stop (tbconvert.workers): forked by the command, from its
main thread, with its imports done; spawned everywhere else; stopped even when deaf."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest
from helpers import CLI_CWD, cli_env

from tbconvert import workers

# Run as its own program: whether this process "owns" itself (as the command does) is a
# process-wide choice that must not leak into the test process.
PROBE = textwrap.dedent('''
    import json, multiprocessing, signal, sys, threading

    def probe():
        return {"imports_inherited": "tbconvert.formats.parquet.writer" in sys.modules,
                "sigterm_default": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
                "sigint_ignored": signal.getsignal(signal.SIGINT) == signal.SIG_IGN}

    class Recording:
        def __init__(self):
            self.log = []
        def acquire(self):
            self.log.append("acquire")
        def release(self):
            self.log.append("release")

    def started(own, in_thread=False):
        from tbconvert import arrowpool, workers
        if own:
            arrowpool.own_process()
            arrowpool.block_pandas()
        ctx = workers.context()
        pool = workers.Workers(ctx, 1, ctx.Queue())
        out = {}
        def go():
            pool.start()
            out.update(pool.submit(probe).result(timeout=60))
        if in_thread:
            t = threading.Thread(target=go)
            t.start()
            t.join()
        else:
            go()
        pool.stop()
        return out

    if __name__ == "__main__":
        import signal
        import tbconvert.formats.parquet.writer  # noqa: F401 - what a forked worker inherits
        from tbconvert import workers
        # the command's own handler for SIGTERM, which a worker must not keep
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(99))
        lock = Recording()
        workers.hold_over_forks(lock)
        result = {"library": started(False)}     # first: owning the process is for good
        result["lock_untouched"] = list(lock.log)
        result.update(command=started(True), lock=list(lock.log),
                      command_from_a_thread=started(True, in_thread=True))
        print(json.dumps(result))
''')


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    script = tmp_path_factory.mktemp("probe") / "probe.py"
    script.write_text(PROBE)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=CLI_CWD, env=cli_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_commands_workers_are_forked_with_its_imports(probed):
    if not sys.platform.startswith("linux"):
        pytest.skip("workers are forked on Linux only")
    assert probed["command"] == {"imports_inherited": True, "sigterm_default": True,
                                 "sigint_ignored": True}


def test_a_fork_of_workers_holds_the_locks_it_was_given(probed):
    if not sys.platform.startswith("linux"):
        pytest.skip("workers are forked on Linux only")
    # taken before the fork, released after it in this process (the child's copy is its own)
    assert probed["lock"] == ["acquire", "release"]
    assert probed["lock_untouched"] == []       # spawning workers forks no copy of this one


@pytest.mark.parametrize("case", ["command_from_a_thread", "library"])
def test_workers_are_spawned_where_a_fork_is_not_known_safe(probed, case):
    # a pool started from another thread, or in a program tbconvert does not own
    assert probed[case] == {"imports_inherited": False, "sigterm_default": True,
                            "sigint_ignored": True}


def deaf(seconds: float) -> None:
    import signal
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(seconds)


def test_a_worker_deaf_to_sigterm_is_killed_when_stopped(monkeypatch):
    monkeypatch.setattr(workers, "STOP_GRACE", 0.5)
    ctx = workers.context()
    pool = workers.Workers(ctx, 1, ctx.Queue())
    pool.submit(deaf, 60)
    time.sleep(2.0)            # the worker is up and has turned SIGTERM away
    t0 = time.monotonic()
    pool.stop()
    assert time.monotonic() - t0 < 10
    assert not pool.processes


def napping(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def test_a_share_is_handed_over_before_the_leader_goes_on():
    """The leading process waits until a worker has begun its share (its own work would
    otherwise keep the pool's threads from handing the share over), but no longer."""
    from tbconvert import cluster
    ctx = workers.context()
    pool = workers.Workers(ctx, 1, None)
    try:
        future = pool.submit(cluster._each, napping, [3.0])
        t0 = time.monotonic()
        pool.handed_over(1, timeout=30)
        assert time.monotonic() - t0 < 2.5 and not future.done()    # begun, not done
        assert future.result() == [3.0]
        t0 = time.monotonic()
        pool.handed_over(1, timeout=0.2)          # nothing was handed over: it waits no more
        assert 0.15 < time.monotonic() - t0 < 2.0
        # a call that began after its wait gave up leaves nothing for the next wait
        future = pool.submit(cluster._each, napping, [0.0])
        pool.handed_over(1, timeout=0.0)
        assert future.result() == [0.0]
        pool.forget_begun()
        t0 = time.monotonic()
        pool.handed_over(1, timeout=0.2)
        assert 0.15 < time.monotonic() - t0 < 2.0
    finally:
        pool.stop()
