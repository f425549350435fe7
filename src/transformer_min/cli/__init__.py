"""The `tmin` command line: one module per command group, each a thin layer over library functions."""
