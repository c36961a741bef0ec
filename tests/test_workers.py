"""How worker processes start and stop (tbconvert.workers): forked by the command, from its
main thread, with its imports done; spawned everywhere else; stopped even when deaf."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
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

    def probe_item(_):
        return probe()

    def ask_process_pool():
        from tbconvert import workers
        ctx = workers.context()
        pool = workers.Workers(ctx, 1, workers.ProgressQueues())
        pool.start()
        return pool, lambda: pool.submit(probe).result(timeout=60)

    def ask_kept_worker():
        from tbconvert.kept import KeptWorkers
        pool = KeptWorkers(1)
        pool.start()
        return pool, lambda: (pool.send(0, probe_item, [None]), pool.receive(0)[0])[1]

    def started(own, in_thread=False, kind=ask_process_pool):
        from tbconvert import arrowpool
        if own:
            arrowpool.own_process()
            arrowpool.block_pandas()
        pools, out = [], {}
        def go():
            pool, ask = kind()
            pools.append(pool)
            out.update(ask())
        if in_thread:
            t = threading.Thread(target=go)
            t.start()
            t.join()
        else:
            go()
        pools[0].stop()
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
        result["kept_library"] = started(False, kind=ask_kept_worker)
        result.update(command=started(True), lock=list(lock.log),
                      command_from_a_thread=started(True, in_thread=True))
        lock.log.clear()
        result.update(kept_command=started(True, kind=ask_kept_worker), kept_lock=list(lock.log),
                      kept_command_from_a_thread=started(True, in_thread=True,
                                                         kind=ask_kept_worker))
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


@pytest.mark.parametrize("kind", ["", "kept_"])
def test_the_commands_workers_are_forked_with_its_imports(probed, kind):
    if not sys.platform.startswith("linux"):
        pytest.skip("workers are forked on Linux only")
    assert probed[kind + "command"] == {"imports_inherited": True, "sigterm_default": True,
                                        "sigint_ignored": True}


@pytest.mark.parametrize("kind", ["", "kept_"])
def test_a_fork_of_workers_holds_the_locks_it_was_given(probed, kind):
    if not sys.platform.startswith("linux"):
        pytest.skip("workers are forked on Linux only")
    # taken before the fork, released after it in this process (the child's copy is its own)
    assert probed[kind + "lock"] == ["acquire", "release"]
    assert probed["lock_untouched"] == []       # spawning workers forks no copy of this one


@pytest.mark.parametrize("case", ["command_from_a_thread", "library", "kept_command_from_a_thread",
                                  "kept_library"])
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
    pool = workers.Workers(ctx, 1, workers.ProgressQueues())
    pool.submit(deaf, 60)
    time.sleep(2.0)            # the worker is up and has turned SIGTERM away
    t0 = time.monotonic()
    pool.stop()
    assert time.monotonic() - t0 < 10
    assert not pool.processes


def napping(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def failing(_) -> None:
    raise ValueError("bad item")


def test_a_kept_worker_takes_its_share_while_the_leader_goes_on():
    """The share is written to the worker's pipe by the leading thread itself: it goes on
    at once, and reads the answer (or what the worker raised) when it is ready for it."""
    from tbconvert.kept import KeptWorkers
    pool = KeptWorkers(2)
    try:
        for k in (0, 1):                        # started (spawned here: they take a while)
            pool.send(k, napping, [0.0])
        assert pool.receive(0) == pool.receive(1) == [0.0]
        t0 = time.monotonic()
        pool.send(0, napping, [1.0, 1.0])
        pool.send(1, napping, [1.5])
        assert time.monotonic() - t0 < 0.5
        assert pool.receive(1) == [1.5]
        assert pool.receive(0) == [1.0, 1.0]
        assert time.monotonic() - t0 < 3.0        # the two shares ran side by side (2 s)
        pool.send(0, failing, [1])
        with pytest.raises(ValueError, match="bad item"):
            pool.receive(0)
        pool.send(0, napping, [0.0])            # the worker outlives what its call raised
        assert pool.receive(0) == [0.0]
    finally:
        pool.stop()
    assert multiprocessing.active_children() == []


def test_a_kept_worker_that_died_is_lost_and_replaced():
    from tbconvert.kept import KeptWorkers, Lost
    pool = KeptWorkers(1)
    try:
        pool.send(0, napping, [60.0])
        (proc,) = multiprocessing.active_children()
        os.kill(proc.pid, signal.SIGKILL)
        with pytest.raises(Lost):
            pool.receive(0)
        proc.join()
        with pytest.raises(Lost):                # its pipe is closed for good
            pool.send(0, napping, [0.0])
            pool.receive(0)
        pool.stop()
        pool.send(0, napping, [0.0])            # a new worker
        assert pool.receive(0) == [0.0]
    finally:
        pool.stop()


def test_a_kept_worker_deaf_to_sigterm_is_killed_when_stopped(monkeypatch):
    from tbconvert.kept import KeptWorkers
    monkeypatch.setattr(workers, "STOP_GRACE", 0.5)
    pool = KeptWorkers(1)
    pool.send(0, deaf, [60])
    time.sleep(2.0)            # the worker is up and has turned SIGTERM away
    t0 = time.monotonic()
    pool.stop()
    assert time.monotonic() - t0 < 10
    assert multiprocessing.active_children() == []


def killing_a_worker(item):
    """``item`` in the leading process: its first item kills the worker holding the other
    share, while that worker is busy with it."""
    if item == "kill":
        time.sleep(1.0)
        for proc in multiprocessing.active_children():
            if proc.name == "tbconvert-kept":
                os.kill(proc.pid, signal.SIGKILL)
        return "killed"
    return napping(item)


def test_a_share_whose_worker_dies_midway_is_run_again():
    from tbconvert import cluster
    from tbconvert.kept import KeptWorkers
    pool = KeptWorkers(1)
    try:
        items = ["kill", 5.0, 0.1]
        out = cluster.run_in_shares(killing_a_worker, items, [1, 1, 1], pool,
                                    lost=lambda item, why: pytest.fail(why), ahead=0)
        assert out == ["killed", 5.0, 0.1]
    finally:
        pool.stop()


def test_progress_queues_make_a_queue_per_start_method_and_drain_as_one():
    import queue as queue_module
    queues = workers.ProgressQueues()
    with pytest.raises(queue_module.Empty):
        queues.get_nowait()
    fork, spawn = queues.for_workers("fork"), queues.for_workers("spawn")
    assert fork is not spawn and queues.for_workers("fork") is fork
    fork.put(3)
    spawn.put(4)
    got, deadline = [], time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < deadline:
        try:
            got.append(queues.get_nowait())
        except queue_module.Empty:
            time.sleep(0.01)      # a put travels through the queue's feeding thread
    assert sorted(got) == [3, 4]
    queues.close()
    queues.join_thread()


# The command's process (forked workers) where a worker dies: the pool that replaces it is
# started from the feeding thread, so it is spawned, and reports through a queue of its own;
# the items still to start go on after the suspects were run alone.
DEATH_PROBE = textwrap.dedent('''
    import json, os, sys

    def die_on_two(item):
        import time
        from tbconvert import workers
        workers.progress().advance(item)
        if item == 2:
            os._exit(3)
        # as a conversion's work goes on after it reports what it read: a report goes to
        # the leading process through the worker's queue thread, and one put just before
        # the result may arrive after the pool is stopped (every one of them, now and then)
        time.sleep(0.05)
        return item * 10, os.getppid()

    class Counting:
        def __init__(self):
            self.n = 0
        def advance(self, n):
            self.n += n

    if __name__ == "__main__":
        from tbconvert import arrowpool, cluster, workers
        arrowpool.own_process()
        arrowpool.block_pandas()
        out = []
        for jobs in (2, 3, 3):
            counted = Counting()
            results = cluster.run_tasks(die_on_two, [1, 2, 3, 4, 5], jobs=jobs, retries=1,
                                        lost=lambda item, why: "lost", progress=counted)
            out.append({"forked": workers.forks_here(), "progress": counted.n,
                        "results": [r if r == "lost" else r[0] for r in results]})
        print(json.dumps(out))
''')


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked on Linux")
def test_a_forked_pool_replaced_after_a_death_reports_progress_too(tmp_path):
    script = tmp_path / "death_probe.py"
    script.write_text(DEATH_PROBE)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          cwd=CLI_CWD, env=cli_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    for out in json.loads(done.stdout):
        # the items the dead pool held and those it never got all finish, but the one that
        # kills every worker it runs in
        assert out["forked"] and out["results"] == [10, "lost", 30, 40, 50]
        # progress came through (a report put just before a worker is stopped may still be
        # on its way and lost: the conversions count what their results say was read); an
        # item the dead pool held is run again, its progress reported again: at most twice
        # each, as item 2 (retried once)
        assert 0 < out["progress"] <= 2 * (1 + 2 + 3 + 4 + 5)
    assert "Traceback" not in done.stderr


# A script as users write them: the Python API's workers are spawned, and a spawned worker
# starts by running the program's main script, so a top-level call with jobs=N would run
# again in every worker (its side effects too) and fail there, costing that worker's run.
SCRIPTS = {
    "unguarded": ('import tbconvert\nprint("started")\n'
                  'tbconvert.convert(LOGS, OUT, to_format="parquet", jobs=2)\n', 3),
    "unguarded_function": ('import tbconvert\nprint("started")\n\ndef main():\n'
                           '    tbconvert.convert(LOGS, OUT, to_format="parquet", jobs=0)\n\n'
                           'main()\n', 7),
    "unguarded_sync": ('import tbconvert\nprint("started")\n'
                       'tbconvert.sync(LOGS, OUT, jobs=2)\n', 3),
    "guarded": ('import tbconvert\nprint("started")\n\ndef main():\n'
                '    tbconvert.convert(LOGS, OUT, to_format="parquet", jobs=2)\n\n'
                'if __name__ == "__main__":\n    main()\n', None),
    "one_job": ('import tbconvert\nprint("started")\n'
                'tbconvert.convert(LOGS, OUT, to_format="parquet", jobs=1)\n', None),
}


@pytest.mark.parametrize("case", sorted(SCRIPTS))
def test_a_script_whose_workers_would_run_it_again_is_refused_before_they_start(tmp_path, case):
    from helpers import FIXTURES
    body, line = SCRIPTS[case]
    out = tmp_path / "out"
    script = tmp_path / "job.py"
    script.write_text(f"LOGS = {str(FIXTURES / 'torch_logdir')!r}\nOUT = {str(out)!r}\n" + body)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=cli_env(), cwd=CLI_CWD, timeout=300)
    assert proc.stdout.count("started") == 1, proc.stdout
    if line is None:
        assert proc.returncode == 0, proc.stderr
        assert (out / "_tbconvert.json").is_file()
        return
    line += 2       # the two lines naming the paths
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("tbconvert.errors.UsageError: jobs=")
    assert f"each run job.py from the top, so its line {line} (" in last, last
    assert 'put that line under `if __name__ == "__main__":`, or pass jobs=1' in last
    assert not out.exists() and os.listdir(tmp_path) == ["job.py"]
