"""Experiment facts (name, description, times, any further keys) from a JSON object that a
source holds beside its data: a TensorBoard.dev export's ``metadata.json``, a logdir's
``tbconvert-experiment.json``. Whatever is read here must also be writable to, and readable
from, every archive.
"""

from __future__ import annotations

import json

from tbconvert import budget
from tbconvert.formats.tbdev.text import escape_all
from tbconvert.model import Experiment
from tbconvert.report import Report

# An archive keeps the further keys a few levels down in a JSON document of its own, which
# is read with the same depth budget as any other: a key nested deeper would be written into
# an archive that could not be read back.
EXTRA_DEPTH = budget.MAX_JSON_DEPTH - 8


def experiment_from(data: dict, keys: tuple, where, report: Report, kind: str,
                    **given) -> Experiment:
    """The :class:`Experiment` of ``data`` (parsed JSON whose depth is already bounded):
    ``keys`` as text, the rest as ``extra``. What does not fit is reported as ``kind``."""
    clean = escape_all(data)
    if clean != data:
        report.add("text_escaped", f"{where}: lone UTF-16 surrogates (text no file format can "
                   "store) are kept spelled as their UTF-8 bytes (%ED%A0%80)", path=where, lost=False)
    facts = {}
    for key in keys:
        value = clean.pop(key, "")
        if value is None:
            value = ""
        if not isinstance(value, str):
            report.add(kind, f"{where}: {key!r} is not a string; kept as its JSON text",
                       path=where, lost=False)
            value = json.dumps(value)
        facts[key] = value
    extra = {}
    for key, value in clean.items():
        if budget.json_depth(value) >= EXTRA_DEPTH:
            report.add(kind, f"{where}: {key!r} is nested more than {EXTRA_DEPTH} levels "
                       "deep, deeper than an archive can keep; left out", path=where)
            continue
        extra[key] = value
    return Experiment(**given, **facts, extra=extra)
