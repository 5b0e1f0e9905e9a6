"""The CVS jaxmaxtext config format: model, loader (placeholders, comments, <changeme>), sweeps."""
