"""Config of the ``pii`` stage."""

from __future__ import annotations

from typing import Literal

import phonenumbers
import pydantic

from stages.base import StageConfig

PiiType = Literal["email", "phone", "cn_resident_id", "bank_card", "ip", "secret"]
#: Every type, in the order of :data:`stages.pii.redact.PRIORITY`.
ALL_TYPES: tuple[PiiType, ...] = ("secret", "email", "cn_resident_id", "bank_card", "phone", "ip")
#: The types that are numbers (left alone in ``skip_number_languages``).
NUMBER_TYPES = frozenset({"phone", "cn_resident_id", "bank_card", "ip"})


class Config(StageConfig):
    """Config of the ``pii`` stage (on by default).

    Attributes:
        types: the detectors applied. Default: all six. Each detector is
            conservative by itself (checksums, issuer prefixes, national
            number plans, public address ranges, fixed token formats;
            docs/stages/pii.md), and on ``../shared/corpus`` (51.5 M
            characters of man pages, fortunes, Bible, Debian Reference and
            code) 5 of the 6,481 edits of its held-out half are not what
            their type says (docs/stages/pii.md, "Measured").
        replacement: ``placeholder`` writes ``<EMAIL>``, ``<PHONE>``,
            ``<CN_ID>``, ``<BANK_CARD>``, ``<IP_ADDRESS>``, ``<SECRET>``;
            ``hash`` writes ``<EMAIL:1f3a9c02>``: 8 hex digits of blake2b
            keyed by ``hash_key`` (or the build seed), over the type and the
            canonical value, so one address is one token in the whole corpus
            (a model can still learn that two mentions are the same person).
        hash_key: the key of ``hash`` mode (any string; a build publishes its
            config with this value redacted). None: a key derived from the
            build ``seed``, which is published in the manifest: anyone with
            the manifest can then test a guessed value (a phone number has
            ~10**10 guesses), so set a private key when hashes are used; a
            build in hash mode without one warns (``stages.pii.warnings``).
        phone_regions: ISO 3166-1 alpha-2 regions whose national phone forms
            (without ``+``) are detected; ``+`` forms are detected for every
            country. Default ``["CN"]``: the corpus is Chinese-first, and a
            national form of another country is too often a plain number
            (``phonenumbers`` regions: ``phonenumbers.SUPPORTED_REGIONS``).
        skip_number_languages: documents whose declared language
            (``lang_hint``, e.g. ``code`` for a source with ``lang: code``)
            is listed keep their numbers: phone, resident ID, bank card and IP
            are not searched there (a constant, a test vector or an address in
            a test is part of the program); e-mail addresses and secrets still
            are. Default ``["code"]``.
    """

    types: tuple[PiiType, ...] = ALL_TYPES
    replacement: Literal["placeholder", "hash"] = "placeholder"
    hash_key: str | None = None
    phone_regions: tuple[str, ...] = ("CN",)
    skip_number_languages: tuple[str, ...] = ("code",)

    @pydantic.field_validator("types")
    @classmethod
    def _types(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """Unique, in priority order (the same set is the same config)."""
        return tuple(t for t in ALL_TYPES if t in value)

    @pydantic.field_validator("phone_regions")
    @classmethod
    def _regions(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """Upper case, known to ``phonenumbers``."""
        out = tuple(dict.fromkeys(r.upper() for r in value))
        unknown = [r for r in out if r not in phonenumbers.SUPPORTED_REGIONS]
        if unknown:
            raise ValueError(f"unknown region(s) {unknown}: ISO 3166-1 alpha-2 codes phonenumbers "
                             "supports, e.g. CN, HK, TW, US")
        return out

    @pydantic.field_validator("hash_key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        if value is not None and not value:
            raise ValueError("an empty hash_key: give a private string, or leave it out (seed-derived key)")
        return value
