"""Every recipe in the README and the docs, run as written.

Shell blocks (``sh``/``bash``) run under bash with the installed ``tbconvert`` on PATH,
``python`` blocks run in one namespace per document (in order, as a reader pastes them),
``sql`` blocks run statement by statement in DuckDB's Python API. Each block gets a fresh
directory holding ``logs/`` (a copy of the bundled PyTorch logdir), ``logs.parquet``,
``logs.h5``, ``archive/`` (a Parquet directory dataset), ``scalars.csv`` and ``fixtures/``
(less what the block itself writes). A block preceded
by ``<!-- docs-test: skip ... -->`` is not run (the comment says why).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FIXTURES, cli_argv, cli_env

pytestmark = pytest.mark.e2e

ROOT = FIXTURES.parent
DOCS = ["README.md", "docs/tables.md", "docs/archives.md"]
_BLOCK = re.compile(r"(<!-- docs-test: skip[^>]*-->\n)?```(\w*)\n(.*?)^```", re.S | re.M)
# The README's first command installs tbconvert; under test it is already installed.
_INSTALL = re.compile(r"python3 -m venv \.venv && \.venv/bin/pip install [^&]+&& ")


def blocks(doc: str):
    text = (ROOT / doc).read_text(encoding="utf-8")
    for m in _BLOCK.finditer(text):
        skip, lang, code = m.group(1), m.group(2), m.group(3)
        line = text.count("\n", 0, m.start(2)) + 1
        if skip or lang not in ("sh", "bash", "python", "sql"):
            continue
        yield line, lang, code


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """What the recipes start from."""
    import tbconvert
    base = tmp_path_factory.mktemp("docs-base")
    shutil.copytree(FIXTURES / "torch_logdir", base / "logs")
    tbconvert.convert(base / "logs", base / "logs.parquet")
    tbconvert.convert(base / "logs", base / "logs.h5")
    tbconvert.convert(base / "logs", base / "archive", to_format="parquet")
    tbconvert.convert(base / "logs", base / "scalars.csv")
    return base


@pytest.fixture(scope="module")
def path_dir(tmp_path_factory):
    """``tbconvert`` and ``python`` as a user's shell finds them."""
    bin_dir = tmp_path_factory.mktemp("docs-bin")
    for name, argv in (("tbconvert", cli_argv()), ("python", [sys.executable]),
                       ("python3", [sys.executable])):
        script = bin_dir / name
        script.write_text("#!/bin/sh\nexec " + " ".join(f"'{a}'" for a in argv) + ' "$@"\n')
        script.chmod(0o755)
    return bin_dir


def _fresh_dir(base: Path, tmp_path: Path, code: str) -> Path:
    work = tmp_path / f"block{len(list(tmp_path.iterdir()))}"
    work.mkdir()
    for name in ("logs", "archive", "logs.parquet", "logs.h5", "scalars.csv"):
        # a block that writes it starts without it
        if re.search(rf"(-o |logs/['\"]?,? +['\"]?){re.escape(name)}(?![\w.])", code):
            continue
        if (base / name).is_dir():
            shutil.copytree(base / name, work / name)
        else:
            shutil.copy(base / name, work / name)
    (work / "fixtures").symlink_to(FIXTURES)
    return work


# README's and tables.md's recipes take more than 5 s each on a shared two-core machine
@pytest.mark.parametrize("doc", [pytest.param(d, marks=pytest.mark.slow) if d in (
    "README.md", "docs/tables.md") else d for d in DOCS])
def test_recipes_run(doc, base, path_dir, tmp_path, monkeypatch):
    found = list(blocks(doc))
    assert found, f"{doc}: no recipes found"
    namespace: dict = {"__name__": "__recipe__"}
    env = cli_env()
    env["PATH"] = f"{path_dir}{os.pathsep}{env.get('PATH', '')}"
    for line, lang, code in found:
        where = f"{doc}:{line}"
        work = _fresh_dir(base, tmp_path, code)
        monkeypatch.chdir(work)
        if lang in ("sh", "bash"):
            script = _INSTALL.sub("", code).replace(".venv/bin/", "")
            p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=work, env=env,
                               capture_output=True, text=True, timeout=900)
            assert p.returncode == 0, f"{where}: exit {p.returncode}\n{script}\n{p.stderr[-3000:]}"
            assert "Traceback" not in p.stderr, f"{where}\n{p.stderr[-3000:]}"
        elif lang == "python":
            try:
                exec(compile(code, where, "exec"), namespace)
            except Exception as exc:
                raise AssertionError(f"{where}: {type(exc).__name__}: {exc}\n{code}") from exc
        else:
            import duckdb
            for statement in _sql_statements(code):
                try:
                    duckdb.sql(statement).fetchall()
                except Exception as exc:
                    raise AssertionError(f"{where}: {exc}\n{statement}") from exc


def _sql_statements(code: str):
    lines = [line.split("--")[0] for line in code.splitlines()]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def test_duckdb_image_recipe_gives_only_images(base, monkeypatch):
    """``blobs`` of an image point is [width, height, image...]: the recipe keeps the images."""
    import duckdb
    text = (ROOT / "docs/archives.md").read_text(encoding="utf-8")
    statement = next(s for _, lang, code in blocks("docs/archives.md") if lang == "sql"
                     for s in _sql_statements(code) if "AS png" in s)
    monkeypatch.chdir(base)
    rows = duckdb.sql(statement).fetchall()
    assert rows and all(bytes(r[-1]).startswith(b"\x89PNG") for r in rows), statement
    assert "unnest(blobs) AS png" not in text
