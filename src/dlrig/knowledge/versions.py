"""Comparable versions for drivers, CUDA releases and Python packages.

Driver versions are dotted integers ("535.104.05"), CUDA "12.4" or "12.4.131", torch
"2.5.1+cu124" (the local part after '+' names the build variant, not the release).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

_LEADING_NUMBERS = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")


@dataclass(frozen=True, order=True)
class Version:
    parts: tuple[int, ...]
    # As written ("535.54.03": drivers zero-pad), for display; not part of comparisons.
    text: str = field(default="", compare=False)

    @classmethod
    def parse(cls, text: str | None) -> Version | None:
        """The leading dotted-number part of `text`; None when there is none."""
        if not text:
            return None
        return _parse(text)

    def truncated(self, length: int) -> Version:
        return Version(
            self.parts[:length], ".".join(self.text.split(".")[:length]) if self.text else ""
        )

    def padded(self, length: int) -> Version:
        return Version(self.parts + (0,) * max(0, length - len(self.parts)))

    @property
    def major(self) -> int:
        return self.parts[0]

    @property
    def minor(self) -> int:
        return self.parts[1] if len(self.parts) > 1 else 0

    def __str__(self) -> str:
        return self.text or ".".join(str(part) for part in self.parts)


@functools.lru_cache(maxsize=8192)
def _parse(text: str) -> Version | None:
    # Versions are immutable, and the resolver parses the same table values many times.
    match = _LEADING_NUMBERS.match(text)
    if not match:
        return None
    return Version(tuple(int(part) for part in match.group(1).split(".")), match.group(1))


def compare(a: str, b: str) -> int:
    """-1, 0 or 1 comparing the numeric parts, shorter versions padded with zeros."""
    va, vb = Version.parse(a), Version.parse(b)
    if va is None or vb is None:
        raise ValueError(f"cannot compare versions {a!r} and {b!r}")
    length = max(len(va.parts), len(vb.parts))
    pa, pb = va.padded(length), vb.padded(length)
    return (pa > pb) - (pa < pb)


def local_variant(version: str | None) -> str | None:
    """The local part of a PEP 440 version: "2.5.1+cu124" -> "cu124"."""
    if not version or "+" not in version:
        return None
    return version.split("+", 1)[1].strip() or None


def release(version: str | None) -> str | None:
    """The public release without the local part: "2.5.1+cu124" -> "2.5.1"."""
    if not version:
        return None
    return version.split("+", 1)[0].strip() or None


def minor_of(version: str | None) -> str | None:
    """ "2.5.1+cu124" -> "2.5"."""
    parsed = Version.parse(release(version))
    if parsed is None:
        return None
    return f"{parsed.major}.{parsed.minor}"


_BUILD_VARIANT = re.compile(r"^(cu\d{2,3}|cpu|cpu\.cxx11\.abi|rocm\d+(\.\d+)*|xpu)$")
_PUBLIC_RELEASE = re.compile(r"^\d+(\.\d+)*(\.post\d+)?$")


def build_variant(version: str | None) -> str | None:
    """The wheel-variant tag of a version: "2.5.1+cu124" -> "cu124"; None for a git hash
    ("1.7.0a0+9ddd3df"), a vendor tag ("+2c916ef.nv22.3") or no local part."""
    local = local_variant(version)
    return local if local and _BUILD_VARIANT.match(local) else None


def is_published_release(version: str | None) -> bool:
    """A release PyTorch published (2.5.1, 2.5.1+cu124), not a nightly, a pre-release, a source
    build or a vendor's fork (2.1.0.dev20230905, 1.12.0a0+2c916ef.nv22.3, 1.4.0a0+013ca32)."""
    if not version:
        return False
    public = release(version) or ""
    if not _PUBLIC_RELEASE.match(public):
        return False
    return local_variant(version) is None or build_variant(version) is not None
