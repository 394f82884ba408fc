"""Credentials out of everything a build publishes or logs.

A source's ``storage_options`` (fsspec/s3fs: ``key``, ``secret``, ``token``,
``client_kwargs.aws_session_token``, ...) must reach the readers, but not the
published ``config.yaml``, ``manifest.json`` or ``run.log.jsonl``, nor the
work directory's run log. :func:`redact` makes a copy in which:

* the value of every key that looks like a secret (:func:`looks_secret`:
  ``key``, ``secret``, ``token``, ``aws_secret_access_key``,
  ``aws_access_key_id``, ``sessionToken``, ``hf_token``, ``password``,
  ``Authorization``, ``credentials``, ...), at any depth, is :data:`REDACTED` (every scalar inside it when it is a mapping or
  list); ``None``, booleans and empty strings are kept (they hide nothing);
* in every string, the secret values found that way (the credentials
  themselves, e.g. inside an error message), the password of a URL
  (``s3://user:pass@host``) and secret-looking URL query parameters
  (``X-Amz-Signature=...``, ``token=...``) are replaced by :data:`REDACTED`.

The project's own keys that contain such words hold no secret and are left
alone by the rules (``token_budget``, ``eos_token``, ``bytes_per_token``,
``document_keys``); ``tests/pipeline/test_publish.py`` checks that a real
build's manifest and config lose nothing but the credentials.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

REDACTED = "<redacted>"

# A key is a credential when one of its words (split at "_", "-", ".",
# spaces and camelCase) is one of these ...
SECRET_WORDS = frozenset({
    "secret", "secrets", "password", "passwords", "passwd", "pwd", "passphrase", "credential", "credentials",
    "session", "auth", "authorization", "apikey", "cookie", "private", "signature", "sig",
})
# ... or when it ends in "key" / "key id" (fsspec's key, access_key,
# aws_access_key_id, account_key, api_key) or in "token" (token, hf_token,
# access_token, aws_session_token), except the tokenizer's own "<x>_token"
# names and rates "per token" (eos_token, bytes_per_token).
NOT_TOKEN_SECRETS = frozenset({"eos", "bos", "pad", "unk", "sep", "cls", "mask", "special", "per"})

# Exact keys that the rules above would call secret but are not (none yet in
# this project's config, manifest or run log; add here rather than bend a rule).
NOT_SECRETS: frozenset[str] = frozenset()

# Keys of mappings that count things by name (a stage's tally: the pii stage
# counts the ``secret`` values it replaced): the names inside are not
# credential names, so their counts are published as they are.
COUNT_TABLES: frozenset[str] = frozenset({"tally"})

# Shortest secret value that is also scrubbed from free text: shorter values
# ("test", "admin") would erase unrelated text such as paths; they are still
# redacted under their key. Real access keys and tokens are 16+ characters.
MIN_SCRUB_CHARS = 8

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/\s:@]*):(?P<password>[^/\s@]+)@")
_QUERY_PARAM = re.compile(r"(?P<sep>[?&;])(?P<name>[^=&;#\s]+)=(?P<value>[^&;#\s]*)")


def looks_secret(key: Any) -> bool:
    """Whether a mapping key names a credential (see :data:`SECRET_WORDS`,
    :data:`NOT_TOKEN_SECRETS`). ``"aws_secret_access_key"``,
    ``"sessionToken"``, ``"key"``, ``"hf_token"``, ``"password"`` -> True;
    ``"token_budget"``, ``"eos_token"``, ``"bytes_per_token"``,
    ``"document_keys"``, ``"endpoint_url"`` -> False."""
    if not isinstance(key, str) or key in NOT_SECRETS:
        return False
    words = [w.lower() for w in _WORD.findall(key)]
    if not words:
        return False
    if not SECRET_WORDS.isdisjoint(words):
        return True
    if words[-1] == "key" or words[-2:] == ["key", "id"]:
        return True
    return words[-1] == "token" and (len(words) == 1 or words[-2] not in NOT_TOKEN_SECRETS)


def _hides_something(value: Any) -> bool:
    return not (value is None or isinstance(value, bool) or value == "")


def secret_values(data: Any) -> set[str]:
    """Every scalar (as text) held under a secret-looking key of ``data``
    (mappings and lists, any depth): the values :func:`redact` also scrubs
    from free text."""
    found: set[str] = set()

    def walk(value: Any, inside: bool, counts: bool = False) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, inside or (not counts and looks_secret(k)), k in COUNT_TABLES)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v, inside)
        elif inside and _hides_something(value):
            found.add(value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value))

    walk(data, False)
    return found


def scrub_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with the given secret values, URL passwords and
    secret-looking URL query parameters replaced by :data:`REDACTED`."""
    for secret in sorted((s for s in secrets if len(s) >= MIN_SCRUB_CHARS), key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    if "://" in text:
        text = _URL_USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", text)
    if "=" in text:
        text = _QUERY_PARAM.sub(lambda m: f"{m['sep']}{m['name']}={REDACTED}" if looks_secret(m["name"])
                                and m["value"] else m[0], text)
    return text


def redact(data: Any, secrets: Iterable[str] = ()) -> Any:
    """A copy of ``data`` (JSON/YAML-like: mappings, lists, scalars) without
    credentials (see the module docstring).

    Args:
        data: the object to publish or log.
        secrets: further secret values to scrub from strings (e.g.
            :func:`secret_values` of the config, when ``data`` is a log line
            that does not hold the config itself).

    Returns:
        The redacted copy; tuples become lists, other types are kept.
    """
    scrub = set(secrets) | secret_values(data)

    def walk(value: Any, inside: bool, counts: bool = False) -> Any:
        if isinstance(value, dict):
            return {k: walk(v, inside or (not counts and looks_secret(k)), k in COUNT_TABLES)
                    for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v, inside) for v in value]
        if inside and _hides_something(value):
            return REDACTED
        if isinstance(value, str):
            return scrub_text(value, scrub)
        return value

    return walk(data, False)
