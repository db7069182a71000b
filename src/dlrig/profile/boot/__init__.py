"""What runs inside the profiled program. `dlrig profile -- CMD` puts this folder first on
PYTHONPATH, so its `sitecustomize` runs in every Python process the command starts (torchrun's
workers included); the modules here use only the standard library and the program's own torch,
because the program's interpreter may not have dlrig installed."""
