"""`python -m transformer_min ...` (also what `torchrun -m transformer_min train ...` runs)."""

import sys

from transformer_min.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
