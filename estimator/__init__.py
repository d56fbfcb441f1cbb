"""The VRAM estimator: memory of a training step, per layer, from source alone."""
