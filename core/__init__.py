"""The analysis core: source and positions, parsing, names, the semantic and training-step
models, diagnostics and configuration. Imports nothing from the layers above it."""
