"""Tampering with a secret, state or id in a test: a changed value that is never the real one.

Overwriting a position with a fixed character is wrong about one time in the alphabet's size
(a URL-safe base64 token starts with ``x`` one time in 64), and then the "wrong" value is the
right one and the test fails by luck. ``tampered`` changes the character to one it is not, and
says so.
"""

from __future__ import annotations


def tampered(value: str, at: int = 0) -> str:
    """``value`` with the character at ``at`` (negative counts from the end) changed to another
    character of the same kind (a letter stays a letter, anything else becomes a letter), so a
    decoder still reads it; never equal to ``value``."""
    index = at % len(value)
    old = value[index]
    new = "A" if old != "A" else "B"
    if old.islower():
        new = "a" if old != "a" else "b"
    changed = value[:index] + new + value[index + 1 :]
    assert changed != value and len(changed) == len(value)
    return changed
