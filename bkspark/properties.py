"""Java ``.properties`` text, as BookKeeper's configuration files use it (``bk_server.conf``, ``client.conf``).

The one parser of the project: the bookie reads its configuration with it
(``bkspark.config.bookie``), the shell its ``--client-conf`` file
(``bkspark.shell.common``).  BookKeeper reads these files with Apache Commons
Configuration's ``PropertiesConfiguration``; the rules kept here are the ones
configuration files use:

* ``key=value``, ``key: value`` or ``key value``; the key ends at the first
  unescaped ``=``, ``:`` or whitespace;
* blank lines and lines starting with ``#`` or ``!`` are skipped;
* a line ending in an odd number of backslashes continues on the next line,
  whose leading whitespace is dropped;
* values are trimmed (Commons Configuration trims); other backslash escapes
  are kept as written, so Windows-style paths and regexes survive;
* a later key wins.  Comma-separated lists stay one string: each reader
  splits the keys it knows as lists.
"""

from __future__ import annotations

import re

__all__ = ["parse_properties"]

_KEY_VALUE = re.compile(r"((?:[^\\:=\s]|\\.)+)\s*[:=]?\s*(.*)$", re.DOTALL)


def _continues(line: str) -> bool:
    """Whether the line ends in an odd number of backslashes (the last one escapes the line break)."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def parse_properties(text: str) -> dict[str, str]:
    """``key -> value`` of a Java properties document (see the module docstring for the rules)."""
    props: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line) and i < len(lines):
            line = line[:-1] + lines[i].lstrip()
            i += 1
        if _continues(line):  # a continuation at the end of the text continues into nothing
            line = line[:-1]
        match = _KEY_VALUE.match(line)
        if match is None:  # a line of only separators: nothing to keep
            continue
        props[match.group(1)] = match.group(2).strip()
    return props
