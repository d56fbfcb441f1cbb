"""`python -m torch_preflight ...`, the same as the `torch-preflight` command."""

from torch_preflight.main import main

if __name__ == "__main__":
    raise SystemExit(main())
