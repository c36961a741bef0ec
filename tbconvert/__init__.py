"""tbconvert: move TensorBoard data between formats without losing anything.

Event files, TensorBoard.dev exports, Parquet and HDF5 archives and analysis
tables all convert through one intermediate model (:mod:`tbconvert.model`).
"""

from tbconvert.api import convert, load, open_reader, open_writer
from tbconvert.errors import TbconvertError
from tbconvert.model import (BlobSequenceSeries, DataClass, Experiment, Metadata, Run,
                             ScalarSeries, TensorSeries)
from tbconvert.report import Issue, Report

__version__ = "0.1.0"

__all__ = [
    "convert", "load", "open_reader", "open_writer", "TbconvertError", "BlobSequenceSeries",
    "DataClass", "Experiment", "Metadata", "Run", "ScalarSeries", "TensorSeries", "Issue",
    "Report", "__version__",
]
