"""The real-time lane over Redis Streams: the contract between the fronts and the workers.

By role, so that each side imports only what it uses:

* :mod:`~voicelane.core.lane.keys` — every Redis key of the lane (one table: type, contents,
  lifetime, writer) and its Lua scripts;
* :mod:`~voicelane.core.lane.messages` — what the streams' entries hold (stream requests,
  input pieces, output events with errors whole, capacity reports);
* :mod:`~voicelane.core.lane.front` — what the fronts do (:class:`RealtimeClient`, asyncio);
* :mod:`~voicelane.core.lane.worker` — what the workers do (claims, :class:`WorkerBatch`:
  all sessions' calls in one pipeline per round, trimming, capacity reports).

``front`` and ``worker`` import only ``keys`` and ``messages``, never each other. This package
imports none of them: import the module of your role.
"""
