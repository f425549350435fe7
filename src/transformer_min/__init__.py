"""transformer-min: "Attention Is All You Need" (Vaswani et al., 2017) as verified, trainable PyTorch code.

Importing the package is cheap: torch is imported by the submodules that need it.
"""

__version__ = "0.1.0"
