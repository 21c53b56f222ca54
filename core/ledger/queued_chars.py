"""The tenants' queued-characters quota: characters of a tenant's unfinished jobs, together.

A job created under the quota reserves its characters in the same script that writes it
(``create_job.lua``: checked against the limit, atomic with the job, so no failover or dead
front can leave characters reserved for a job that does not exist) and records what it holds
in its ``queued_chars`` field; it gives them back when it ends, in the same script as its
final state (``ending.lua``). The other tenant limits live beside the state they bound: the
request rate in :mod:`voicelane.core.quotas`, streams in the real-time lane.
"""

from __future__ import annotations

RETRY_S = 60.0
"""The retry hint of a submission refused for this quota (jobs take about this long to move
on; there is no exact time to give)."""
