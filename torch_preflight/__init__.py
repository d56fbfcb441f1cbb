"""torch-preflight: a static linter and language server for PyTorch training code."""

__version__ = "0.1.0"
