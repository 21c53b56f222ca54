"""The agent socket's one writer: whole messages in order, urgent ones first, none of a
silenced owner, futures that say when a message went out."""

from __future__ import annotations

import asyncio
import json

import pytest

from voicelane.api.agent_outbox import Outbox, OutboxClosedError, Owner


def test_messages_go_out_whole_in_order_urgent_first_and_silenced_ones_dropped() -> None:
    async def main() -> tuple[list[dict[str, str]], Outbox]:
        sent: list[str] = []

        async def send(text: str) -> None:
            sent.append(text)
            await asyncio.sleep(0)  # another producer may run mid-send

        outbox = Outbox()
        a, b = Owner("a"), Owner("b")
        outbox.put({"n": "a1"}, owner=a)
        outbox.put({"n": "b1"}, owner=b)
        dropped = outbox.put({"n": "a2"}, owner=a)
        outbox.put({"n": "cancelled a"}, urgent=True)
        a.silenced = True
        runner = asyncio.create_task(outbox.run(send))
        await dropped  # resolved, though never sent
        outbox.put({"n": "a3"}, owner=a)
        last = outbox.put({"n": "b2"}, owner=b)
        await last
        outbox.finish()
        await runner
        return [json.loads(text) for text in sent], outbox

    sent, outbox = asyncio.run(main())
    assert [m["n"] for m in sent] == ["cancelled a", "b1", "b2"]
    assert outbox.dropped == 3 and outbox.sent == 3


def test_a_failed_send_closes_the_outbox_and_fails_what_waits() -> None:
    async def main() -> None:
        async def send(text: str) -> None:
            raise ConnectionError("gone")

        outbox = Outbox()
        first = outbox.put({"n": 1})
        second = outbox.put({"n": 2})
        with pytest.raises(ConnectionError):
            await outbox.run(send)
        assert outbox.closed
        for waiting in (first, second):  # the one being sent, the one after it
            with pytest.raises(OutboxClosedError):
                await waiting
        with pytest.raises(OutboxClosedError):
            await outbox.put({"n": 3})

    asyncio.run(main())
