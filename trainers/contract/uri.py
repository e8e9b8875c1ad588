"""Tracking URIs as a person or a log may see them: any password masked."""

from __future__ import annotations

import re

# userinfo "user:password@" sits before the first "/" of the authority
_URI_PASSWORD = re.compile(r"(?P<head>://[^/:@\s]*:)[^@\s/]*(?P<at>@)")


def redact_uri(uri: str) -> str:
    """The URI with any password replaced by ***, for everything a person or a log sees."""
    return _URI_PASSWORD.sub(r"\g<head>***\g<at>", uri)
