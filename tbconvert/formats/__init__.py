"""One package per format (``formats/<name>/``), each a :class:`~tbconvert.formats.base.Format`
with its reader and writer, found through its record in :mod:`tbconvert.registry`.

The contract, the layers and the checklist for adding a format: docs/architecture.md.
"""
