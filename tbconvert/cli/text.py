"""Names from data made safe to show on a terminal. Every line the command prints goes
through :func:`shown`.

Run and tag names, paths and messages may hold newlines (which would forge output
lines), carriage returns and escape sequences (which rewrite or restyle the
terminal), bidirectional overrides (which reorder what is shown) and lone
surrogates from names that are not UTF-8 (which the terminal's encoder refuses).
Each such character is shown as a visible escape instead: ``\\n``, ``\\r``,
``\\x1b``, ``\\u202e``, ``\\udcff``.
"""

from __future__ import annotations

import re
import unicodedata

# Characters that are safe without a closer look: printable ASCII.
_PLAIN = re.compile(r"[ -~]*")
# Unicode categories never shown as they are: controls (Cc), format characters such as
# bidirectional overrides and zero-width marks (Cf), surrogates (Cs), line and paragraph
# separators (Zl, Zp), unassigned and private-use code points (Cn, Co).
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp", "Cn", "Co"})
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    if ch in _SHORT:
        return _SHORT[ch]
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def shown(value) -> str:
    """``value`` as one line of plain text: hidden and control characters escaped."""
    s = value if isinstance(value, str) else str(value)
    if _PLAIN.fullmatch(s):
        return s
    return "".join(_escape(c) if unicodedata.category(c) in _HIDDEN else c for c in s)
