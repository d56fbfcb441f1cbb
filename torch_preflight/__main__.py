"""`python -m torch_preflight ...`, the same as the `torch-preflight` command."""

from torch_preflight.main import run

if __name__ == "__main__":
    run()
