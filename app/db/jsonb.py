"""jsonb values as PostgreSQL prints them, read back and written out again fast and without loss.

orjson reads and writes JSON in a tenth of json's CPU, but it reads an integer past 64 bits as a
float (a loss), refuses to write one, and refuses ``1e400``; jsonb holds all of them. json takes
what orjson cannot.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

# 19 digits in a row: maybe an integer past 64 bits (jsonb prints numbers without exponents, so
# 1e400 is 401 digits too); a string that holds them is merely read by json.
_MAYBE_PAST_64_BITS = re.compile(r"[0-9]{19}")


def loads(text: str) -> Any:
    """The value of a jsonb text (a column the driver hands over as text, a stored event's data)."""
    if _MAYBE_PAST_64_BITS.search(text):
        return json.loads(text)
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # json's text of an infinite number (1e400): json reads it
        return json.loads(text)


def dumps(value: Any) -> bytes:
    """Compact JSON of a value read by :func:`loads` (a stream's frame)."""
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError: an integer past 64 bits
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
