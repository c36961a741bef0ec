"""tbconvert: move TensorBoard data between formats without losing anything.

Event files, TensorBoard.dev exports, Parquet and HDF5 archives and analysis
tables all convert through one intermediate model (:mod:`tbconvert.model`).
"""

from tbconvert.api import convert, load, open_reader, open_writer
from tbconvert.errors import TbconvertError
from tbconvert.model import (BlobSequenceSeries, DataClass, Experiment, Metadata, Run,
                             ScalarSeries, TensorSeries)
from tbconvert.report import Issue, Report
from tbconvert.tables import (Data, audio, audio_table, extract_media, hparams, hparams_table,
                              histograms, histograms_table, images, images_table, open_image,
                              read, scalars, scalars_table, text, text_table)

__version__ = "0.1.0"

__all__ = [
    "convert", "load", "open_reader", "open_writer", "TbconvertError", "BlobSequenceSeries",
    "DataClass", "Experiment", "Metadata", "Run", "ScalarSeries", "TensorSeries", "Issue",
    "Report", "__version__",
    "read", "Data", "scalars", "scalars_table", "hparams", "hparams_table", "histograms",
    "histograms_table", "text", "text_table", "images", "images_table", "audio", "audio_table",
    "open_image", "extract_media",
]
