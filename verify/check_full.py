"""python verify/check_full.py: the 'decoder full scaling' stage(s) of `tmin verify`, as the paper-reading posts run it."""

import sys

from _common import run

if __name__ == "__main__":
    sys.exit(run("decoder", "full", "scaling"))
