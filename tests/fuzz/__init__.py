"""The fuzz targets of every parser (harness.py says how they run)."""
