"""python verify/check_encoder.py: the 'positional encoder' stage(s) of `tmin verify`, as the paper-reading posts run it."""

import sys

from _common import run

if __name__ == "__main__":
    sys.exit(run("positional", "encoder"))
