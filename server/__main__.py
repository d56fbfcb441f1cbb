import sys

from torch_preflight.server.cli import main

sys.exit(main())
