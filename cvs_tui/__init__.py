"""cvs-tui: run the CVS jaxmaxtext training-validation suite on every node at once, and watch it live."""

__version__ = "0.1.0"
