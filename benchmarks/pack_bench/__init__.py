"""The parts of benchmarks/pack_vs_formats.py: dlrig pack against LMDB, HDF5, WebDataset,
LitData and MDS, and the loose files themselves, on one synthetic ImageNet-like set of JPEGs.

    jpegs.py    the data set: real JPEGs of varied size made with Pillow
    writers.py  each format's own writer, timed to `sync`
    readers.py  each format's reader, as its documentation says to read it (child side)
    child.py    one reading process per format and trial, driven over stdin/stdout
    cache.py    the cache state before each run: page-cold, fully cold, warm, checked
    runner.py   the parent: packing, the interleaved trials, the results file
    report.py   the tables, the targets and the key=value last line

Imports of the libraries measured stay inside functions: the children run in other virtual
environments (LitData and WebDataset in one, MDS in its own) that hold only their library.
"""

BATCH = 64
