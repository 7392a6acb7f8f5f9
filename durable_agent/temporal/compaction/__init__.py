"""How node activity payloads stay small: one owner for the packed format, both of its
sides and the caches that make it work.

Every activity input and result is written into the workflow's history, at every step of
every run, and read again by every replay; so a payload carries only what the other side
cannot work out itself (`format`). The invariants:

- **Temporal is the source of truth.** Nothing an activity rebuilds is used unless it
  matches the chained digest the workflow computed (`digest`); on a miss or a mismatch the
  activity reads the messages from the workflow by query, never guesses.
- **One prefix, proven.** A model request names the prefix of the conversation the
  activity should hold by its length and digest; the activity's cache (`caches`) answers
  only for exactly that prefix of that workflow.
- **Each side owns its half.** The workflow side (`packer`, one `RequestPacker` per run)
  decides what is left out; the activity side (`resolver`) restores it. The idempotency key
  of a tool call is left out and derived again by one rule (`format.default_idempotency_key`).
- **Old shapes keep working.** Requests scheduled by release 0.2 and before carry their new
  messages whole (`legacy_v02`), chosen by which field the input has; release 0.1's
  continued runs name messages held by earlier runs (`packer`'s offset and digest).
"""

from .caches import HistoryCache, PayloadCaches, ToolDefinitionsCache, ToolReturnCache
from .digest import DIGEST_CHARS, EMPTY_DIGEST, HistoryDigest, definitions_digest, extend_digest
from .format import default_idempotency_key, pack_messages, unpack_messages

__all__ = [
    "DIGEST_CHARS",
    "EMPTY_DIGEST",
    "HistoryCache",
    "HistoryDigest",
    "PayloadCaches",
    "ToolDefinitionsCache",
    "ToolReturnCache",
    "default_idempotency_key",
    "definitions_digest",
    "extend_digest",
    "pack_messages",
    "unpack_messages",
]
