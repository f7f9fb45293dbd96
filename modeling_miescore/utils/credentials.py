"""Credentials that must never be printed: API keys and passwords in URLs
(``http://user:secret@host/v1?api_key=K`` is shown as ``http://user:***@host/v1?api_key=***``), also in the request
lines third-party HTTP clients log. An API key is checked before any request: httpx would refuse a header with a
newline or a space on every attempt, with the key in the message.
"""

from __future__ import annotations

import base64
import logging
import re
from typing import Iterable
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = ["SECRET_QUERY_NAMES", "checked_api_key", "redact", "redact_library_logs", "redacted_url", "url_secrets"]

_USERINFO_RE = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/@\s]+)@")
_MASK = "***"
# query parameters that carry a credential (case-insensitive; "-" and "_" alike)
SECRET_QUERY_NAMES = ("api_key", "apikey", "key", "token", "access_token", "auth", "password", "passwd", "pwd",
                      "pw", "secret", "client_secret", "sig", "signature", "code")
_QUERY_SECRET_RE = re.compile(
    r"(?P<name>[?&;](?:%s)=)(?P<value>[^&#;\s'\"<>]+)" % "|".join(
        n.replace("_", "[_-]?") for n in sorted(SECRET_QUERY_NAMES, key=len, reverse=True)), re.I)
# the libraries whose log records can hold a request URL
_URL_LOGGERS = ("httpx", "httpcore", "openai", "urllib3")


def redacted_url(url: str) -> str:
    """``url`` with the password of its user info replaced by ``***`` (a user name alone is kept: tokens are
    often passed as the user name, so it is masked too when there is no password)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact(url)
    if "@" in parts.netloc:
        userinfo, host = parts.netloc.rsplit("@", 1)
        url = urlunsplit(parts._replace(netloc=f"{_masked_userinfo(userinfo)}@{host}"))
    return _masked_query(url)


def url_secrets(url: str) -> list:
    """The secrets :func:`redacted_url` masks in ``url``: its password (or a user name given alone), the HTTP Basic
    credentials an HTTP client (httpx) sends for its ``user:password``, and the values of its credential query
    parameters (to mask them too where a server echoes them in an error, as some echo the Authorization header)."""
    secrets = []
    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        netloc = ""
    if "@" in netloc:
        user, has_password, password = (unquote(p) for p in netloc.rsplit("@", 1)[0].partition(":"))
        secrets.append(password if has_password else user)
        secrets.append(base64.b64encode(f"{user}:{password}".encode()).decode())
    for match in _QUERY_SECRET_RE.finditer(url):
        secrets += [match.group("value"), unquote(match.group("value"))]
    return [s for s in dict.fromkeys(secrets) if s]


def _masked_query(text: str) -> str:
    return _QUERY_SECRET_RE.sub(lambda m: m.group("name") + _MASK, text)


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with each of ``secrets`` (empty ones ignored) and the credentials of every URL in it masked."""
    text = str(text)
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, _MASK)
        if secret.strip() and secret.strip() != secret:
            text = text.replace(secret.strip(), _MASK)
    text = _USERINFO_RE.sub(lambda m: m.group("scheme") + _masked_userinfo(m.group("userinfo")) + "@", text)
    return _masked_query(text)


class _RedactingFilter(logging.Filter):
    """Formats a record's message once and masks the credentials in it (:func:`redact`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


def redact_library_logs() -> None:
    """Mask credentials in what the HTTP libraries log (idempotent): a filter on each of their loggers."""
    for name in _URL_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _RedactingFilter) for f in logger.filters):
            logger.addFilter(_RedactingFilter())


def _masked_userinfo(userinfo: str) -> str:
    user, has_password, _ = userinfo.partition(":")
    return f"{user}:{_MASK}" if has_password else _MASK


def _describe(char: str) -> str:
    names = {"\n": "a newline", "\r": "a carriage return", "\t": "a tab", " ": "a space"}
    return names.get(char, f"the character U+{ord(char):04X}")


def checked_api_key(key: str, env: str) -> str:
    """``key`` when it can be sent as a bearer token; ``ValueError`` naming ``env`` and the first bad character
    (never the key) otherwise."""
    for position, char in enumerate(key):
        if not 0x21 <= ord(char) <= 0x7E:
            raise ValueError(f"the API key in ${env} contains {_describe(char)} at position {position + 1} of "
                             f"{len(key)}; an API key is printable ASCII without spaces: fix the variable "
                             f"(e.g. export {env}=\"$(tr -d '[:space:]' < keyfile)\")")
    return key
