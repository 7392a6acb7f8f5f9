"""The user's own payload codec: zlib, under an encoding name of its own.

Nothing here knows about durable-agent; the plugin must leave this codec in place.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

ENCODING = b"binary/x-acme-zlib"


class AcmeZlibCodec(PayloadCodec):
    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [
            Payload(metadata={"encoding": ENCODING}, data=zlib.compress(p.SerializeToString()))
            for p in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        decoded = []
        for payload in payloads:
            if payload.metadata.get("encoding") == ENCODING:
                payload = Payload.FromString(zlib.decompress(payload.data))
            decoded.append(payload)
        return decoded
