"""bench/tempo.py's ways to a speed: espeak's own rate where it reaches, atempo from speed 1,
and the lane's split (the engine's nearest speed times the rest)."""

from __future__ import annotations

import pytest

from bench.tempo import SPEEDS, Way, ways


def test_every_speed_has_atempo_and_the_lane_where_espeak_cannot_reach() -> None:
    found = ways(0.5, 2.5)
    assert found[0] == Way("none", 1.0, 1.0, 1.0)
    assert Way("espeak", 2.0, 2.0, 1.0) in found and Way("espeak", 0.5, 0.5, 1.0) in found
    assert not any(w.path == "espeak" and w.speed in (0.25, 4.0) for w in found)
    assert Way("lane", 0.25, 0.5, 0.5) in found
    lane_4 = next(w for w in found if w.path == "lane" and w.speed == 4.0)
    assert (lane_4.engine_speed, lane_4.tempo) == (2.5, 4.0 / 2.5)
    assert {w.speed for w in found if w.path == "atempo"} == set(SPEEDS) - {1.0}
    for way in found:
        assert way.engine_speed * way.tempo == pytest.approx(way.speed)
