"""TensorFlow event files (``*tfevents*``): the format TensorBoard reads."""

from __future__ import annotations

from pathlib import Path

from tbconvert import sourcefiles
from tbconvert.formats.base import Format, classes_on_demand, deferred
from tbconvert.formats.tfevents.event_files import is_event_file


class TfeventsFormat(Format):
    name = "tfevents"
    description = "TensorBoard event files (a logdir of runs, or one event file)"
    reader = deferred("tbconvert.formats.tfevents.reader:TfeventsReader")
    writer = deferred("tbconvert.formats.tfevents.writer:TfeventsWriter")
    requires = ("google.protobuf", "tensorboard", "crc32c")

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


__all__ = ["TfeventsFormat", "TfeventsReader", "TfeventsWriter"]

__getattr__ = classes_on_demand(TfeventsFormat, __name__)
