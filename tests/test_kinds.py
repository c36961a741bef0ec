"""The catalogue of report kinds: complete, enforced, and the same in the docs."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from tbconvert import kinds
from tbconvert.report import Report

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "robustness.md"
BEGIN, END = "<!-- kinds table: begin -->\n", "<!-- kinds table: end -->"
_KIND = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)+$")


def _package_dir() -> Path:
    import tbconvert
    return Path(tbconvert.__file__).parent


def _literal(node) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and _KIND.match(node.value):
        return node.value
    return None


def kinds_in_source() -> dict[str, str]:
    """Kind literals in the package: ``x.add("kind", message, ...)`` and the callbacks that
    forward to it (``on_problem``/``on_note("kind", message)``, ``_lose_...(..., "kind")``), and
    ``kind = "..."`` assignments, each with where it is."""
    found = {}
    for path in sorted(_package_dir().rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            literals = []
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in ("add", "on_problem", "on_note") and len(node.args) >= 2:
                    literals = [_literal(node.args[0])]
                elif name.startswith("_lose"):
                    literals = [_literal(a) for a in node.args]
            elif isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "kind" for t in node.targets):
                literals = [_literal(n) for n in ast.walk(node.value)]
            for kind in filter(None, literals):
                found.setdefault(kind, f"{path.name}:{node.lineno}")
    return found


def test_every_kind_in_the_source_is_catalogued():
    found = kinds_in_source()
    assert len(found) > 50, "the scan found too few kinds to be looking in the right place"
    missing = {k: where for k, where in found.items() if k not in kinds.KINDS}
    assert not missing, f"report kinds missing from tbconvert/kinds.py: {missing}"


def test_every_catalogued_kind_is_used():
    unused = set(kinds.KINDS) - set(kinds_in_source())
    assert not unused, f"catalogued kinds no code reports: {sorted(unused)}"


def test_each_kind_has_a_one_line_meaning():
    for name, kind in kinds.KINDS.items():
        assert _KIND.match(name)
        assert kind.meaning and "\n" not in kind.meaning and "|" not in kind.meaning, name
        assert kind.lost in (True, False, None)


def test_report_refuses_an_unknown_kind():
    report = Report()
    with pytest.raises(ValueError, match="some_new_kind"):
        report.add("some_new_kind", "x")
    assert report.issues == []


def test_report_refuses_a_lost_flag_the_catalogue_contradicts():
    report = Report()
    with pytest.raises(ValueError, match="run_renamed"):
        report.add("run_renamed", "x", lost=True)
    with pytest.raises(ValueError, match="corrupt_record"):
        report.add("corrupt_record", "x", lost=False)
    report.add("bad_metadata", "either way", lost=False)
    report.add("bad_metadata", "either way", lost=True)
    assert [i.lost for i in report.issues] == [False, True]


def _doc_table(text: str) -> str:
    assert BEGIN in text and END in text, f"{DOC.name} lacks the kinds table markers"
    return text.split(BEGIN, 1)[1].split(END, 1)[0]


def test_docs_list_every_kind():
    assert _doc_table(DOC.read_text(encoding="utf-8")) == kinds.markdown_table(), (
        "docs/robustness.md's kinds table is out of date: run python tests/test_kinds.py --write")


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    text = DOC.read_text(encoding="utf-8")
    DOC.write_text(text.replace(_doc_table(text), kinds.markdown_table()), encoding="utf-8")
