"""concrete-jungle: ConcretePlant hard-negative mining and Cement loss (arXiv 2604.13313) on open_clip."""

__version__ = "0.1.0"
