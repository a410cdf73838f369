"""kiln's version: part of every cache key (kept at the bottom of the layer stack)."""

__version__ = "0.1.0"
