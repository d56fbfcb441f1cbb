"""The language server (pygls): diagnostics, quick fixes, VRAM inlay hints and hover."""
