"""Caps on what one input file may expand to while it is read, each raised from the environment.

A small file can ask for a great deal: a gzip stream of one repeated byte expands a thousandfold
(a 949 KiB ``.csv.gz`` to about 1 GB of text, which the parser then holds several times over),
and a pickle can hold one long session by reference again and again (200,000 references to a
session of 3,000 items: 6·10⁸ events from 1 MB). Each cap is checked while the file is read,
before the expansion is paid for, and the refusal says which variable raises it:

- ``ATTNSVM_MAX_DECOMPRESSED_BYTES`` (default 512 MiB): the bytes one gzip file or zip member may
  decompress to (MovieLens 20M's ``ratings.csv``, the largest registered file, is 509 MiB);
- ``ATTNSVM_MAX_EVENTS`` (default 10⁸): the events a file's sessions may expand to.

A value is read when a file is, so a test (or a user) sets the variable for one call. It goes
through the checks of every other number the package is given (``config_base``): an integer of
at least 1, or one line naming the variable.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from attnsvm.rec.config_base import Range, check_number, coerce
from attnsvm.rec.data.errors import DataFormatError


@dataclass(frozen=True)
class Limit:
    variable: str  # the environment variable that raises it
    default: int
    unit: str  # what it counts: "bytes", "events"

    def value(self) -> int:
        """The cap: ``variable``'s value where it is set, else ``default``."""
        text = os.environ.get(self.variable)
        if text is None:
            return self.default
        number = coerce(text, int, self.variable, "environment")
        check_number(number, Range(1, 2**63 - 1), f"environment: {self.variable}")
        return number

    def check(self, source: str | Path, amount: int, verb: str) -> None:
        """A ``DataFormatError`` naming ``source`` if ``amount`` is over the cap; ``verb`` says
        how ``source`` came to it (``"expands to"``)."""
        cap = self.value()
        if amount > cap:
            raise DataFormatError(
                source,
                f"{verb} {amount:,} {self.unit}, over the cap of {cap:,} that guards against "
                f"decompression and expansion bombs: set {self.variable} higher to read it",
            )


DECOMPRESSED_BYTES = Limit("ATTNSVM_MAX_DECOMPRESSED_BYTES", 2**29, "bytes")
EXPANDED_EVENTS = Limit("ATTNSVM_MAX_EVENTS", 10**8, "events")
