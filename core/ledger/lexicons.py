"""The tenants' pronunciation lexicons: stored, listed, replaced, deleted, one default per
tenant, and resolved into the :class:`~voicelane.core.lexicon.Lexicon` a request applies.

Every key is the tenant's own (``vl:tenant:{tenant}:lexicons``, ``...:lexicon_info``,
``...:lexicon_default``: :mod:`.keys`), and every method takes the tenant: one tenant can
never list, read, delete or apply another's lexicon — a name it does not own is unknown.
The keys live until the tenant deletes its lexicons (:attr:`.keys.Lifetime.KEPT`).

Bounded per tenant, together (checked atomically with the write, ``lexicon_put.lua``):
:data:`MAX_TENANT_LEXICONS` lexicons, :data:`MAX_TENANT_ENTRIES` entries and
:data:`MAX_TENANT_BYTES` bytes of stored entries (the UTF-8 JSON of
:meth:`Lexicon.to_json`). A write past a bound is refused whole with
:class:`~voicelane.common.errors.TextTooLargeError` (413, ``text_too_large``, permanent: it
does not pass by waiting, only by deleting or shrinking a lexicon).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import redis

from voicelane.common.errors import InvalidInputError, NotFoundError, TextTooLargeError
from voicelane.core.ledger.keys import LEXICON_DEFAULT, LEXICON_INFO, LEXICONS
from voicelane.core.ledger.lua import register
from voicelane.core.lexicon import Lexicon, LexiconEntry

__all__ = [
    "MAX_TENANT_BYTES",
    "MAX_TENANT_ENTRIES",
    "MAX_TENANT_LEXICONS",
    "NAME_PATTERN",
    "LexiconInfo",
    "LexiconListing",
    "Lexicons",
    "StoredLexicon",
    "check_name",
]

MAX_TENANT_LEXICONS = 20
"""Lexicons one tenant may keep."""
MAX_TENANT_ENTRIES = 5_000
"""Entries of one tenant's lexicons, together."""
MAX_TENANT_BYTES = 512 * 1024
"""Bytes of one tenant's stored entries (UTF-8 JSON), together."""
NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""A lexicon's name."""


def check_name(name: str, *, field: str = "name") -> str:
    """``name`` if it is a lexicon name (:data:`NAME_PATTERN`), else InvalidInputError."""
    if not NAME_PATTERN.fullmatch(name):
        raise InvalidInputError(
            f"{field}: {name[:80]!r} is not a lexicon name (1 to 64 of A-Z a-z 0-9 _ -)",
            field=field,
        )
    return name


@dataclass(frozen=True, slots=True)
class LexiconInfo:
    """What the listing shows of one lexicon."""

    name: str
    entries: int
    size_bytes: int
    """Of its stored entries (UTF-8 JSON): what counts against :data:`MAX_TENANT_BYTES`."""
    updated_at: float
    """Unix seconds of its last write."""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "entry_count": self.entries,
            "size_bytes": self.size_bytes,
            "updated_at": self.updated_at,
        }

    @classmethod
    def from_stored(cls, name: str, raw: bytes | str) -> LexiconInfo:
        data = json.loads(raw)
        return cls(name, int(data["entries"]), int(data["size_bytes"]), float(data["updated_at"]))


@dataclass(frozen=True, slots=True)
class LexiconListing:
    """A tenant's lexicons (by name) and its default."""

    lexicons: tuple[LexiconInfo, ...]
    default: str | None

    @property
    def entries(self) -> int:
        return sum(info.entries for info in self.lexicons)

    @property
    def size_bytes(self) -> int:
        return sum(info.size_bytes for info in self.lexicons)


@dataclass(frozen=True, slots=True)
class StoredLexicon:
    info: LexiconInfo
    lexicon: Lexicon
    default: bool
    """It is its tenant's default."""


class Lexicons:
    """The tenants' lexicons in Redis. Safe to share between threads."""

    def __init__(self, client: redis.Redis) -> None:
        self.redis = client
        self._put = register(client, "lexicon_put")
        self._delete = register(client, "lexicon_delete")
        self._set_default = register(client, "lexicon_default")
        self._clear_default = register(client, "lexicon_undefault")
        self._resolve = register(client, "lexicon_resolve")

    # ---------------------------------------------------------------- writing
    def put(
        self, tenant: str, name: str, lexicon: Lexicon, *, now: float | None = None
    ) -> tuple[LexiconInfo, bool]:
        """Create or replace the tenant's lexicon ``name``: its info, and whether it is new.
        Past a bound (the tenant's lexicons together, this one's new content counted instead
        of its old) nothing is written and TextTooLargeError says which."""
        check_name(name)
        body = lexicon.to_json()
        size_bytes = len(body.encode("utf-8"))
        info = LexiconInfo(name, len(lexicon.entries), size_bytes, now or time.time())
        stored = json.dumps(
            {"entries": info.entries, "size_bytes": size_bytes, "updated_at": info.updated_at}
        )
        outcome, held = cast(
            list[Any],
            self._put(
                keys=[LEXICONS.key(tenant), LEXICON_INFO.key(tenant)],
                args=[
                    name,
                    body,
                    stored,
                    info.entries,
                    size_bytes,
                    MAX_TENANT_LEXICONS,
                    MAX_TENANT_ENTRIES,
                    MAX_TENANT_BYTES,
                ],
            ),
        )
        outcome = outcome.decode() if isinstance(outcome, bytes) else str(outcome)
        if outcome in ("created", "replaced"):
            return info, outcome == "created"
        raise _over_bound(outcome, int(held))

    def delete(self, tenant: str, name: str) -> bool:
        """Delete the tenant's lexicon ``name`` (NotFoundError if it has none of that name);
        True when it was the default, which is then cleared."""
        check_name(name)
        done = int(
            cast(
                int,
                self._delete(
                    keys=[
                        LEXICONS.key(tenant),
                        LEXICON_INFO.key(tenant),
                        LEXICON_DEFAULT.key(tenant),
                    ],
                    args=[name],
                ),
            )
        )
        if not done:
            raise _unknown(name)
        return done == 2

    def set_default(self, tenant: str, name: str) -> None:
        """Make ``name`` the lexicon applied to the tenant's requests that name none."""
        check_name(name)
        found = self._set_default(
            keys=[LEXICON_INFO.key(tenant), LEXICON_DEFAULT.key(tenant)], args=[name]
        )
        if not int(cast(int, found)):
            raise _unknown(name)

    def clear_default(self, tenant: str, name: str | None = None) -> bool:
        """No default lexicon any more (with ``name``: only if it is that one). True when one
        was cleared."""
        args = [check_name(name)] if name is not None else []
        return bool(
            int(cast(int, self._clear_default(keys=[LEXICON_DEFAULT.key(tenant)], args=args)))
        )

    # ---------------------------------------------------------------- reading
    def default(self, tenant: str) -> str | None:
        raw = cast(bytes | None, self.redis.get(LEXICON_DEFAULT.key(tenant)))
        return raw.decode() if raw is not None else None

    def list(self, tenant: str) -> LexiconListing:
        """The tenant's lexicons by name, and its default (one round trip)."""
        pipe = self.redis.pipeline(transaction=True)
        pipe.hgetall(LEXICON_INFO.key(tenant))
        pipe.get(LEXICON_DEFAULT.key(tenant))
        infos, default = pipe.execute()
        lexicons = sorted(
            (LexiconInfo.from_stored(name.decode(), raw) for name, raw in infos.items()),
            key=lambda info: info.name,
        )
        return LexiconListing(tuple(lexicons), default.decode() if default is not None else None)

    def get(self, tenant: str, name: str) -> StoredLexicon:
        """The tenant's lexicon ``name``; NotFoundError if it has none of that name."""
        check_name(name)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hget(LEXICONS.key(tenant), name)
        pipe.hget(LEXICON_INFO.key(tenant), name)
        pipe.get(LEXICON_DEFAULT.key(tenant))
        body, info, default = pipe.execute()
        if body is None or info is None:
            raise _unknown(name)
        return StoredLexicon(
            LexiconInfo.from_stored(name, info),
            Lexicon.from_json(body.decode()),
            default is not None and default.decode() == name,
        )

    def resolve(self, tenant: str, names: Sequence[str] | None) -> tuple[Lexicon, tuple[str, ...]]:
        """What a request applies, and the names it came from, in one round trip: the entries
        of the named lexicons in order (a later lexicon's entry wins for the same grapheme);
        ``None``: the tenant's default, if it has one; ``[]``: none. A name the tenant has
        no lexicon of is InvalidInputError naming ``lexicons``."""
        if isinstance(names, str):
            raise TypeError("names is a sequence of lexicon names, not one string")
        if names is not None:
            if not names:
                return Lexicon(), ()
            _check_names(names)
        reply = cast(
            list[bytes | None],
            self._resolve(
                keys=[LEXICONS.key(tenant), LEXICON_DEFAULT.key(tenant)], args=list(names or ())
            ),
        )
        entries: list[LexiconEntry] = []
        found: list[str] = []
        for raw_name, body in zip(reply[::2], reply[1::2], strict=True):
            name = raw_name.decode() if raw_name is not None else ""
            if body is None:
                if names is None:
                    continue  # a default without its lexicon (cannot happen: deleting clears it)
                raise InvalidInputError(f"lexicons: unknown lexicon {name!r}", field="lexicons")
            entries.extend(Lexicon.from_json(body.decode()).entries)
            found.append(name)
        return Lexicon(tuple(entries)), tuple(found)


def _check_names(names: Sequence[str]) -> None:
    if len(names) > MAX_TENANT_LEXICONS:
        raise InvalidInputError(
            f"lexicons: {len(names)} named; at most {MAX_TENANT_LEXICONS}", field="lexicons"
        )
    seen: set[str] = set()
    for name in names:
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            raise InvalidInputError(f"lexicons: unknown lexicon {name!r}", field="lexicons")
        if name in seen:
            raise InvalidInputError(f"lexicons: {name!r} is named twice", field="lexicons")
        seen.add(name)


def _unknown(name: str) -> NotFoundError:
    return NotFoundError(f"no lexicon named {name!r}")


def _over_bound(bound: str, held: int) -> TextTooLargeError:
    limits = {
        "lexicons": f"{held} lexicons; a tenant keeps at most {MAX_TENANT_LEXICONS}",
        "entries": f"{held:,} entries in all; the limit is {MAX_TENANT_ENTRIES:,}",
        "bytes": f"{held:,} bytes of entries in all; the limit is {MAX_TENANT_BYTES:,}",
    }
    return TextTooLargeError(
        f"lexicon: the tenant's lexicons would hold {limits[bound]} "
        "(delete or shrink a lexicon first)",
        field="lexicon",
    )
