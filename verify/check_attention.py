"""python verify/check_attention.py: the 'attention multihead' stage(s) of `tmin verify`, as the paper-reading posts run it."""

import sys

from _common import run

if __name__ == "__main__":
    sys.exit(run("attention", "multihead"))
