"""A request's fields as LibreTranslate and DeepL clients send them: a JSON object, or an
`application/x-www-form-urlencoded` body (libretranslatepy, older DeepL clients; a field may repeat,
as DeepL's `text` does), or the query string; the body's fields win over the query's.

The body is whole and bounded already (heed.serve.app.BodyLimit); its fields are bounded here, so a
form of a hundred thousand empty fields is refused before it is parsed into a hundred thousand
strings. Mistakes are `BadField`s: the API's router words them in its own error shape.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request


class BadField(Exception):
    """A request the compat routers refuse: `status` (400, 413), a one-line `message`, the `field`."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.field = status, message, field


@dataclass(frozen=True)
class Fields:
    """A request's fields: name -> list of values (a JSON value is a list of one)."""

    values: Mapping[str, list[Any]]

    def text(self, name: str, default: str | None = None) -> str | None:
        """One string field (its last value, as Flask's request.values gives); a BadField for a non-string."""
        found = self.values.get(name)
        if not found:
            return default
        value = found[-1]
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise BadField(400, f"{name} must be a string", name)
        return str(value)

    def texts(self, name: str) -> tuple[list[str], bool] | None:
        """A field that is one string or a list of them (a JSON list, or a repeated form field) ->
        (the strings, whether it was a list); None when absent."""
        found = self.values.get(name)
        if not found:
            return None
        if len(found) == 1 and isinstance(found[0], list):
            items, many = found[0], True
        else:
            items, many = found, len(found) > 1
        for k, item in enumerate(items):
            if not isinstance(item, str):
                raise BadField(400, f"{name}[{k}] must be a string", f"{name}[{k}]" if many else name)
        return list(items), many

    def flag(self, name: str, default: bool = False) -> bool:
        """A boolean field: JSON true/false, or "1"/"0", "true"/"false" in a form."""
        found = self.values.get(name)
        if not found:
            return default
        value = found[-1]
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("1", "true", "0", "false"):
            return value.lower() in ("1", "true")
        raise BadField(400, f"{name} must be true or false (or 1 or 0)", name)


async def read_fields(request: Request, *, max_fields: int) -> Fields:
    """The request's query and body fields, at most `max_fields` of each; a 413 past that, a 400
    for a body that is neither a JSON object nor a form."""
    values: dict[str, list[Any]] = {}
    # the raw query from the ASGI scope: request.url would build and parse the whole URL first
    for name, value in _form(_utf8(request.scope.get("query_string", b""), "query string"), max_fields,
                             "query string"):
        values.setdefault(name, []).append(value)
    body = await request.body()
    if not body.strip():
        return Fields(values)
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    # Browser clients send JSON as text/plain to spare a CORS preflight; a form never starts with {.
    if kind == "application/json" or kind.endswith("+json") or (kind in ("", "text/plain") and
                                                                body.lstrip()[:1] in (b"{", b"[")):
        try:
            parsed = json.loads(body)
        except (ValueError, RecursionError) as e:
            raise BadField(400, f"the body is not valid JSON ({e})", "body") from None
        if not isinstance(parsed, dict):
            raise BadField(400, "the body must be a JSON object", "body")
        if len(parsed) > max_fields:
            raise BadField(413, f"the body has {len(parsed)} fields; the server takes at most {max_fields}", "body")
        body_values = {str(name): [value] for name, value in parsed.items()}
    elif kind in ("application/x-www-form-urlencoded", ""):
        body_values = {}
        for name, value in _form(_utf8(body, "form"), max_fields, "form"):
            body_values.setdefault(name, []).append(value)
    else:
        raise BadField(400, f"send the fields as JSON or as application/x-www-form-urlencoded, not {kind}", "body")
    return Fields({**values, **body_values})


def _utf8(raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadField(400, f"the {what} is not UTF-8", "body") from None


def _form(text: str, max_fields: int, what: str) -> list[tuple[str, str]]:
    if not text:
        return []
    try:
        return parse_qsl(text, keep_blank_values=True, max_num_fields=max_fields, errors="strict")
    except ValueError:  # parse_qsl's own refusal past max_num_fields, or bad UTF-8 in a %-escape
        if text.count("&") + 1 > max_fields:
            raise BadField(413, f"the {what} has {text.count('&') + 1} fields or more; the server takes at most "
                                f"{max_fields}", "body") from None
        raise BadField(400, f"the {what} is not valid UTF-8 once %-decoded", "body") from None
