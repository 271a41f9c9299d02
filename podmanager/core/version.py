"""The package version, readable from any layer."""

__version__ = "0.1.0"
