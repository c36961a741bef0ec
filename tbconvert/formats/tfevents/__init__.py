"""TensorFlow event files (``*tfevents*``): the format TensorBoard reads."""

from __future__ import annotations

from pathlib import Path

from tbconvert import sourcefiles
from tbconvert.formats.base import Format
from tbconvert.formats.tfevents.layout import is_event_file
from tbconvert.formats.tfevents.reader import TfeventsReader
from tbconvert.formats.tfevents.writer import TfeventsWriter


class TfeventsFormat(Format):
    name = "tfevents"
    description = "TensorBoard event files (a logdir of runs, or one event file)"
    directory = True
    reader = TfeventsReader
    writer = TfeventsWriter

    @classmethod
    def sniff(cls, path: Path) -> bool:
        try:
            if path.is_file():
                return is_event_file(path.name)
            for _, _, files in sourcefiles.walk(path):
                if any(is_event_file(f) for f in files):
                    return True
        except OSError:
            return False
        return False
