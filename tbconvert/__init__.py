"""tbconvert: move TensorBoard data between formats without losing anything.

Event files, TensorBoard.dev exports, Parquet and HDF5 archives and analysis
tables all convert through one intermediate model (:mod:`tbconvert.model`).

The names below are imported on first use, so that the command line starts
quickly and can be interrupted cleanly from its first moment.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_WHERE = {
    "tbconvert.api": ("convert", "open_reader", "open_writer"),
    "tbconvert.daskframe": ("to_dask",),
    "tbconvert.describe": ("info",),
    "tbconvert.errors": ("DataLossWarning", "TbconvertError"),
    "tbconvert.exports": ("tbdev_export",),
    "tbconvert.formats.base": ("Options",),
    "tbconvert.model": ("BlobSequenceSeries", "DataClass", "Experiment", "Metadata", "Run",
                        "ScalarSeries", "TensorSeries"),
    "tbconvert.report": ("Issue", "Report"),
    "tbconvert.incremental": ("sync",),
    "tbconvert.incremental.watch": ("sync_watch",),
    "tbconvert.tables": ("Data", "audio", "audio_table", "extract_media", "hparams",
                         "hparams_table", "histograms", "histograms_table", "images",
                         "images_table", "open_image", "read", "scalars", "scalars_table",
                         "tensors", "tensors_table", "text", "text_table"),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}

__all__ = [*_MODULE_OF, "__version__"]


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'tbconvert' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
