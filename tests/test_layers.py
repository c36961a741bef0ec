"""The layers hold: read every module's imports (also those inside functions) and calls.

model -> formats -> api -> tables -> cli (docs/architecture.md): a module imports only
from its own layer or those below it, and only the command line prints or exits.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

import tbconvert

PACKAGE = Path(tbconvert.__file__).parent

# Lowest first. Each name is a top-level module or package of tbconvert.
LAYERS = (
    ("base", {"errors", "report", "budget", "dtypes", "model", "names", "output", "interrupts",
              "sourcefiles", "arrowpool", "malloc", "columns", "kinds", "restarts", "workers", "kept",
              "scratch", "checksum", "media_headers", "arrayfile"}),
    # the registry is the formats' catalogue; remote wraps readers and writers for URLs
    ("formats", {"formats", "registry", "remote"}),
    ("api", {"api", "cluster", "daskframe", "describe", "exports", "incremental", "runtasks",
             "verify"}),
    ("tables", {"tables", "tbparse"}),
    ("cli", {"cli", "__main__"}),
)
RANK = {unit: rank for rank, (_, units) in enumerate(LAYERS) for unit in units}

# Crossings still to remove. Each entry must still exist (the test says when it is gone).
KNOWN_CROSSINGS: set[tuple[str, str]] = set()

# Calls that print or end the process, allowed outside the command line only here.
PRINTS_OR_EXITS = {"print", "exit", "quit", "sys.exit", "os._exit", "os.abort",
                   "sys.stdout.write", "sys.stderr.write", "sys.stdout.flush",
                   "sys.stderr.flush"}
KNOWN_EXITS = {
    # a worker process whose parent is gone ends itself; no output is involved
    ("workers.py", "os._exit"),
}


@functools.cache
def modules() -> list[tuple[str, ast.Module]]:
    return [(path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(encoding="utf-8")))
            for path in sorted(PACKAGE.rglob("*.py"))]


def unit_of(rel: str) -> str:
    return rel.split("/")[0].removesuffix(".py")


def imported(tree) -> set[str]:
    """Dotted names of the tbconvert modules (or module attributes) a module imports."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return {n for n in out if n.startswith("tbconvert.")}


def target_unit(name: str) -> str | None:
    part = name.split(".")[1]
    return part if part in RANK else None


def test_every_module_has_a_layer():
    units = {unit_of(rel) for rel, _ in modules()} - {"__init__"}
    assert units <= set(RANK), f"put these in a layer of LAYERS: {sorted(units - set(RANK))}"


def crossings() -> set[tuple[str, str]]:
    found = set()
    for rel, tree in modules():
        unit = unit_of(rel)
        if unit == "__init__":      # the package's lazy names reach every layer on purpose
            continue
        for name in imported(tree):
            target = target_unit(name)
            if target is not None and RANK[target] > RANK[unit]:
                module = ".".join(name.split(".")[:3]) if target in ("tables", "cli") else name
                found.add((rel, module))
    return found


def test_no_module_imports_from_a_higher_layer():
    new = {c for c in crossings() if c not in KNOWN_CROSSINGS}
    assert not new, ("these modules import from a higher layer (see docs/architecture.md): "
                     + "; ".join(f"{rel} imports {name}" for rel, name in sorted(new)))


def test_known_crossings_still_exist():
    gone = KNOWN_CROSSINGS - crossings()
    assert not gone, f"remove these from KNOWN_CROSSINGS, they are fixed: {sorted(gone)}"


@pytest.mark.parametrize("forbidden", ["tbconvert.api", "tbconvert.tables", "tbconvert.cli"])
def test_formats_import_neither_api_tables_nor_cli(forbidden):
    for rel, tree in modules():
        if not rel.startswith("formats/"):
            continue
        bad = {n for n in imported(tree) if n == forbidden or n.startswith(forbidden + ".")}
        bad = {n for n in bad if (rel, ".".join(n.split(".")[:3])) not in KNOWN_CROSSINGS}
        assert not bad, f"{rel} imports {sorted(bad)}"


def test_model_imports_no_format():
    tree = ast.parse((PACKAGE / "model.py").read_text(encoding="utf-8"))
    assert not {n for n in imported(tree) if n.startswith("tbconvert.formats")
                or n in ("tbconvert.registry", "tbconvert.api")}


def test_only_the_command_line_prints_or_exits():
    found = set()
    for rel, tree in modules():
        if unit_of(rel) in ("cli", "__main__"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) in PRINTS_OR_EXITS:
                found.add((rel, ast.unparse(node.func)))
            elif isinstance(node, ast.Raise) and node.exc is not None \
                    and "SystemExit" in ast.unparse(node.exc):
                found.add((rel, "raise SystemExit"))
            elif isinstance(node, ast.Attribute) and ast.unparse(node) in ("sys.stdout",
                                                                           "sys.stderr"):
                found.add((rel, ast.unparse(node)))
    assert found == KNOWN_EXITS, f"only tbconvert/cli prints or exits: {sorted(found - KNOWN_EXITS)}"


def test_the_checks_see_a_crossing(tmp_path):
    """The import reader finds imports inside functions too (a lazy import is still one)."""
    tree = ast.parse("def f():\n    from tbconvert import api\n    import tbconvert.cli.ui\n")
    assert imported(tree) == {"tbconvert.api", "tbconvert.cli.ui"}
