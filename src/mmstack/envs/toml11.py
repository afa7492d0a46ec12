"""pixi.toml in TOML 1.1, read with Python's TOML 1.0 reader (tomllib).

pixi >= 0.73 reads TOML 1.1, and its own examples use what 1.1 adds to inline tables: newlines
between their entries, comments there, and a trailing comma. Those three only change layout, so
`loads` first tries tomllib as is and, when that fails, retries on the text with each inline table
joined onto one line (comments inside dropped, a trailing comma before `}` removed), strings left
byte for byte. What else 1.1 adds (the `\\e` and `\\xHH` escapes, times without seconds) is not
rewritten: such a file is refused with a message that says so.
"""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - 3.10: the `tomli` dependency
    import tomli as tomllib

TOMLDecodeError = tomllib.TOMLDecodeError
NOT_READ = ("of TOML 1.1, mmstack reads inline tables over several lines (comments, trailing comma), "
            "not the \\e or \\xHH escapes or times without seconds")


def loads(text: str) -> dict:
    """tomllib.loads, with TOML 1.1's multi-line inline tables accepted; TOMLDecodeError otherwise
    (its message then says which TOML 1.1 syntax is not read)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        first = exc
    joined = join_inline_tables(text)
    if joined != text:
        try:
            return tomllib.loads(joined)
        except tomllib.TOMLDecodeError:
            pass
    raise tomllib.TOMLDecodeError(f"{first} ({NOT_READ})") from None


def join_inline_tables(text: str) -> str:
    """text with every inline table on one line: inside `{...}` (outside strings) a newline becomes
    a space, a comment is dropped and a comma before `}` is removed."""
    out: list[str] = []
    depth = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            end = _string_end(text, i)
            out.append(text[i:end])
            i = end
            continue
        if c == "#":
            end = text.find("\n", i)
            end = n if end < 0 else end
            if depth == 0:
                out.append(text[i:end])
            i = end
            continue
        if c == "{":
            depth += 1
        elif c == "}" and depth:
            depth -= 1
            while out and out[-1] in (" ", "\t", "\r"):
                out.pop()
            if out and out[-1] == ",":
                out.pop()
        elif c == "\n" and depth:
            c = " "
        out.append(c)
        i += 1
    return "".join(out)


def _string_end(text: str, i: int) -> int:
    """The index after the string that starts at text[i] (basic, literal, or their multi-line forms)."""
    q = text[i]
    if text.startswith(q * 3, i):
        j = i + 3
        while True:
            k = text.find(q * 3, j)
            if k < 0:
                return len(text)
            if q == '"' and _escaped(text, k):
                j = k + 1
                continue
            while text.startswith(q, k + 3):  # up to two quotes may close a multi-line string's body
                k += 1
            return k + 3
    j = i + 1
    while j < len(text) and text[j] != "\n":
        if text[j] == "\\" and q == '"':
            j += 2
            continue
        if text[j] == q:
            return j + 1
        j += 1
    return j


def _escaped(text: str, k: int) -> bool:
    backslashes = 0
    while k - 1 - backslashes >= 0 and text[k - 1 - backslashes] == "\\":
        backslashes += 1
    return backslashes % 2 == 1
