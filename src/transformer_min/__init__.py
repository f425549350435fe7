"""transformer-min: "Attention Is All You Need" (Vaswani et al., 2017) as verified, trainable PyTorch code.

Importing the package is cheap: torch is imported by the submodules that need it.

The version is the installed distribution's: importlib.metadata.version("transformer-min") (`tmin --version`).
"""
