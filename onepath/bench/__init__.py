"""The vendor-neutral benchmark (``python -m onepath bench``)."""
