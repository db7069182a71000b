"""Knowledge tables: compatibility rules, the GPU catalogue, Xid codes, failure signatures.

The facts live in versioned data files under `data/`, every row with its `source` and `as_of`.
The modules here load them once, validate them on load, and give typed access.
"""
