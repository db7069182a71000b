"""What `dlrig pack` reads: an ImageFolder tree, a CSV/JSONL list of paths and labels, or a
user's `module:factory` Dataset. Each is a numbered list of samples with a name and a label.

The listing is deterministic (sorted), so an interrupted pack can be resumed against the same
listing; its fingerprint (names and labels) tells a changed source from the same one.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from dlrig.errors import InputError
from dlrig.inputs import call_factory, load_factory

T = TypeVar("T")

# torchvision's ImageFolder accepts these (torchvision/datasets/folder.py, IMG_EXTENSIONS);
# other data (audio, video, arrays) is packed with `--extensions`.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
_PATH_COLUMNS = ("path", "file", "filename", "filepath", "file_path", "image", "image_path")
_LABEL_COLUMNS = ("label", "class", "target", "category", "y")
_MANIFEST_MAX_BYTES = 4 << 30


class SampleReadError(Exception):
    """One sample of the source cannot be read (packing stops, or skips it with --skip-bad)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name}: {reason}")
        self.name = name
        self.reason = reason


@dataclass
class Source:
    """A numbered list of samples: `get(i)` gives sample i's bytes and label."""

    kind: str  # imagefolder | csv | jsonl | factory
    location: str  # the path or module:factory as the user gave it
    names: Sequence[str]
    labels: Sequence[int]
    label_map: dict[str, int] | None = None  # class name -> label, when labels are names
    paths: Sequence[str] = ()  # per sample, for file sources
    dataset: Any = None  # the factory's Dataset
    extra: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.names)

    def get(self, position: int) -> tuple[bytes, int]:
        if self.dataset is not None:
            data, label = _from_dataset(self.dataset, position)
            name = f"sample {position}"
        else:
            name = self.paths[position]
            try:
                with open(name, "rb", buffering=0) as stream:
                    data, label = stream.readall(), self.labels[position]
            except OSError as exc:
                raise SampleReadError(name, f"cannot read it ({exc.strerror or exc})") from None
        if not data:
            # A zero-byte "image" packs and checksums fine, then fails to decode mid-epoch.
            raise SampleReadError(name, "an empty sample (0 bytes): nothing to decode")
        return data, label

    def size_hint(self, position: int) -> int:
        """The sample's size in bytes, for planning shards (a stat, or reading it)."""
        if self.paths:
            try:
                return os.stat(self.paths[position]).st_size
            except OSError:
                return 0
        return len(self.get(position)[0])

    def fingerprint(self) -> str:
        digest = hashlib.blake2b(digest_size=16)
        digest.update(f"{self.kind}\0{len(self)}\0".encode())
        step = 65536
        for start in range(0, len(self), step):
            names = self.names[start : start + step]
            labels = self.labels[start : start + step]
            text = "".join(f"{n}\0{lb}\n" for n, lb in zip(names, labels, strict=True))
            digest.update(text.encode("utf-8", "surrogateescape"))
        return digest.hexdigest()

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "location": self.location, "samples": len(self), **self.extra}


def _from_dataset(dataset: Any, position: int) -> tuple[bytes, int]:
    try:
        item = dataset[position]
    except Exception as exc:  # noqa: BLE001 - the user's Dataset: report whatever it raised
        raise SampleReadError(f"sample {position}", f"{type(exc).__name__}: {exc}") from None
    data, label = (item[0], item[1]) if isinstance(item, tuple) and len(item) == 2 else (item, -1)
    return _as_bytes(data, position), _as_label(label, position)


def _as_bytes(data: Any, position: int) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    if isinstance(data, str | os.PathLike):
        try:
            return Path(data).read_bytes()
        except OSError as exc:
            raise SampleReadError(str(data), f"cannot read it ({exc.strerror})") from None
    if type(data).__module__ == "numpy" and hasattr(data, "dtype"):
        # Arrays keep their dtype and shape: stored as .npy bytes (numpy.load reads them back).
        import numpy as np

        buffer = io.BytesIO()
        np.save(buffer, data, allow_pickle=False)
        return buffer.getvalue()
    raise InputError(
        f"sample {position}: the Dataset returned {type(data).__name__}, not bytes",
        fix="return (bytes, label) from __getitem__ (the file's encoded bytes, e.g. JPEG), "
        "a file path, or a numpy array",
    )


def _as_label(label: Any, position: int) -> int:
    try:
        return int(label)
    except (TypeError, ValueError):
        raise InputError(
            f"sample {position}: the label {label!r} is not an integer",
            fix="return an integer class index as the label",
        ) from None


def open_source(
    location: str, extensions: Sequence[str] | None = IMAGE_EXTENSIONS, factory_ok: bool = True
) -> Source:
    """The Source a user named: a folder, a .csv/.jsonl file, or a module:factory."""
    path = Path(location)
    if path.is_dir():
        return _image_folder(path, extensions)
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix == ".csv":
            return _listing(path, "csv", _csv_rows(path))
        if suffix in (".jsonl", ".ndjson"):
            return _listing(path, "jsonl", _jsonl_rows(path))
        raise InputError(
            f"{path}: not a dataset (a {suffix or 'suffix-less'} file)",
            fix="give an ImageFolder directory (SRC/CLASS/FILE), a .csv or .jsonl list of "
            "paths and labels, or package.module:factory",
        )
    if factory_ok and ":" in location and not path.exists():
        return _factory(location)
    raise InputError(f"{location}: no such file or directory", fix="check the dataset path")


def _visible(name: str) -> bool:
    return not name.startswith(".")


def _image_folder(root: Path, extensions: Sequence[str] | None) -> Source:
    wanted = None if extensions is None else tuple(e.lower() for e in extensions)
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError as exc:
        raise InputError(
            f"{root}: cannot list it ({exc.strerror})", fix="check permissions"
        ) from None
    classes = [e.name for e in entries if _visible(e.name) and e.is_dir()]
    names: list[str] = []
    labels: list[int] = []
    paths: list[str] = []
    others: Counter[str] = Counter()
    used: list[str] = []
    cut = len(os.path.join(str(root), ""))  # names are paths relative to the root
    for label_name in classes:
        found_any = False
        for directory, dirnames, filenames in os.walk(
            os.path.join(root, label_name), followlinks=True
        ):
            dirnames[:] = sorted(d for d in dirnames if _visible(d))
            for filename in sorted(filenames):
                if not _visible(filename):
                    continue
                suffix = os.path.splitext(filename)[1].lower()
                if wanted is not None and suffix not in wanted:
                    others[suffix or "(none)"] += 1
                    continue
                full = os.path.join(directory, filename)
                names.append(full[cut:])
                paths.append(full)
                labels.append(len(used))
                found_any = True
        if found_any:
            used.append(label_name)
    if not names:
        seen = ", ".join(f"{suffix} ×{n}" for suffix, n in others.most_common(4))
        what = (
            f"none of its {len(classes)} subfolders holds files ending in "
            f"{', '.join(wanted or ())}" + (f" (found {seen})" if seen else "")
            if classes
            else "it has no class subfolders"
        )
        raise InputError(
            f"{root}: not a dataset: {what}",
            fix="point at the ImageFolder root (SRC/CLASS/FILE), or pass --extensions for "
            "other kinds of files (e.g. --extensions .wav,.flac or --extensions any)",
        )
    return Source(
        "imagefolder",
        str(root.resolve()),
        names,
        labels,
        {name: number for number, name in enumerate(used)},
        paths,
        extra={"extensions": list(wanted) if wanted is not None else "any"},
    )


def _pick(columns: Sequence[str], wanted: Sequence[str]) -> str | None:
    lowered = {c.strip().lower(): c for c in columns}
    return next((lowered[w] for w in wanted if w in lowered), None)


def _read_listing(path: Path) -> str:
    size = path.stat().st_size
    if size == 0:
        raise InputError(f"{path}: the file is empty", fix="give a list of paths and labels")
    if size > _MANIFEST_MAX_BYTES:
        raise InputError(f"{path}: the list is larger than 4 GB", fix="split it")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(
            f"{path}: cannot be read as UTF-8 text ({exc})", fix="check the file"
        ) from None


def _csv_rows(path: Path) -> list[tuple[str, str | None]]:
    reader = csv.DictReader(io.StringIO(_read_listing(path)))
    columns = reader.fieldnames or []
    path_column = _pick(columns, _PATH_COLUMNS)
    label_column = _pick(columns, _LABEL_COLUMNS)
    if path_column is None:
        raise InputError(
            f"{path}: no path column (the header is {', '.join(columns) or 'empty'})",
            fix=f"name the column of file paths one of: {', '.join(_PATH_COLUMNS)}",
        )
    return [
        (row[path_column] or "", row.get(label_column) if label_column else None) for row in reader
    ]


def _jsonl_rows(path: Path) -> list[tuple[str, str | None]]:
    rows: list[tuple[str, str | None]] = []
    for number, line in enumerate(_read_listing(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(
                f"{path} line {number}: not JSON ({exc.msg})", fix="one object a line"
            ) from None
        if not isinstance(record, dict):
            raise InputError(f"{path} line {number}: not a JSON object", fix="one object a line")
        path_key = _pick(list(record), _PATH_COLUMNS)
        if path_key is None:
            raise InputError(
                f"{path} line {number}: no path key",
                fix=f"give each object one of: {', '.join(_PATH_COLUMNS)}",
            )
        label_key = _pick(list(record), _LABEL_COLUMNS)
        label = record.get(label_key) if label_key else None
        rows.append((str(record[path_key]), None if label is None else str(label)))
    return rows


def _listing(path: Path, kind: str, rows: list[tuple[str, str | None]]) -> Source:
    if not rows:
        raise InputError(f"{path}: lists no samples", fix="add one row per file")
    base = path.parent
    names = [name.strip() for name, _ in rows]
    if any(not name for name in names):
        line = next(n for n, name in enumerate(names, start=2) if not name)
        raise InputError(f"{path}: row {line} has an empty path", fix="give every row a path")
    raw_labels = [label.strip() if label is not None else "" for _, label in rows]
    label_map: dict[str, int] | None = None
    try:
        labels = [int(label) if label else -1 for label in raw_labels]
    except ValueError:
        label_map = {name: n for n, name in enumerate(sorted(set(raw_labels)))}
        labels = [label_map[label] for label in raw_labels]
    paths = [name if os.path.isabs(name) else str(base / name) for name in names]
    return Source(kind, str(path.resolve()), names, labels, label_map, paths)


def _factory(target: str) -> Source:
    factory = load_factory(target, "a Dataset", "mypkg.data:make_dataset")
    dataset = call_factory(target, factory)
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        raise InputError(
            f"{target}: returned {type(dataset).__name__}, not a map-style Dataset",
            fix="return an object with __len__ and __getitem__ (a torch Dataset)",
        )
    length = len(dataset)
    if length == 0:
        raise InputError(f"{target}: the Dataset is empty", fix="return a Dataset with samples")
    # Labels come with each sample; the listing's labels are placeholders until it is read.
    return Source(
        "factory", target, _Computed(length, str), _Computed(length, lambda _: 0), dataset=dataset
    )


class _Computed(Sequence[T]):
    """`length` items made from their index ("0", "1", … or 0, 0, …) without a list of a
    million of them."""

    def __init__(self, length: int, item: Callable[[int], T]) -> None:
        self.length = length
        self.item = item

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self.item(i) for i in range(*index.indices(self.length))]
        if not -self.length <= index < self.length:
            raise IndexError(index)
        return self.item(index % self.length)


def mean_size_bytes(source: Source, probes: int = 256, seed: int = 0) -> float:
    """The mean sample size from a random handful (a stat per file; reads for a factory)."""
    count = len(source)
    budget = probes if source.paths else min(probes, 32)
    picks = random.Random(seed).sample(range(count), min(count, budget))
    sizes = []
    for position in picks:
        try:
            sizes.append(source.size_hint(position))
        except SampleReadError:
            continue
    return sum(sizes) / len(sizes) if sizes else 0.0
