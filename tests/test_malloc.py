"""Freed memory kept for reuse by the command's process (tbconvert.malloc)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from helpers import CLI_CWD, FIXTURES, cli_env

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")

# Three rounds of ten 4 MiB arrays, each touched and freed: the page faults of the third.
PROBE = textwrap.dedent('''
    import resource, sys
    import numpy as np
    from tbconvert import malloc
    if sys.argv[1] == "keep":
        print(malloc.keep_freed_memory())
    def round_():
        arrays = [np.ones(1 << 19) for _ in range(10)]
        del arrays
    round_()
    round_()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    round_()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
''')


def _probe(mode: str, **env) -> list[str]:
    clean = {k: v for k, v in cli_env(**env).items()
             if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES" or k in env}
    done = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                          cwd=CLI_CWD, env=clean, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@linux_only
def test_kept_memory_is_touched_again_without_page_faults():
    default = int(_probe("default")[0])
    made, kept = _probe("keep")
    assert made == "True"
    # by default glibc gives back about half of the 40 MiB (10,240 pages) each round (5,098
    # faults measured); kept, the third round finds all its pages (0 faults)
    assert default > 2000, default
    assert int(kept) < default // 4, (kept, default)


@linux_only
@pytest.mark.parametrize("name", ["MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"])
def test_the_users_own_malloc_settings_stand(name):
    value = "65536" if name.startswith("MALLOC") else "glibc.malloc.trim_threshold=65536"
    made, _ = _probe("keep", **{name: value})
    assert made == "False"


def test_the_command_keeps_freed_memory_and_the_library_does_not(tmp_path):
    script = textwrap.dedent('''
        import sys
        import tbconvert
        from tbconvert import cli, malloc
        made = []
        malloc.keep_freed_memory = lambda: made.append("made") or True
        # the library makes no process-wide choice
        tbconvert.convert(sys.argv[1], sys.argv[2], jobs=1)
        print(len(made))
        with cli._own_process("convert"):
            print(len(made))
    ''')
    done = subprocess.run([sys.executable, "-c", script, str(FIXTURES / "torch_logdir"),
                           str(tmp_path / "o.parquet")], capture_output=True, text=True,
                          cwd=CLI_CWD, env=cli_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "1"]
