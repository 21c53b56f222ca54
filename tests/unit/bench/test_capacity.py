"""bench/capacity.py's pure parts: reading Redis's INFO and /proc, the deltas between two
snapshots, and the arithmetic of the Redis ceiling."""

from __future__ import annotations

import math

import pytest

from bench.capacity import (
    CLOCK_TICKS,
    CommandStat,
    Snapshot,
    book_hours_per_hour,
    delta,
    mean_concurrency,
    parse_commandstats,
    parse_info,
    parse_proc_stat,
    processes_for,
    tree_sums,
    units_at,
)

INFO = """# Server\r
redis_version:7.0.15\r
process_id:4101\r
executable:/usr/bin/redis-server\r
\r
# Stats\r
total_commands_processed:1200\r
total_net_input_bytes:50000\r
total_net_output_bytes:90000\r
\r
# CPU\r
used_cpu_sys_main_thread:1.500000\r
used_cpu_user_main_thread:2.250000\r
\r
# Commandstats\r
cmdstat_xadd:calls=300,usec=1500,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r
cmdstat_client|setname:calls=2,usec=3,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r
cmdstat_info:calls=9,usec=900,usec_per_call=100.00,rejected_calls=0,failed_calls=0\r
"""


def test_info_fields_by_name_without_section_headers() -> None:
    info = parse_info(INFO)
    assert info["process_id"] == "4101"
    assert info["executable"] == "/usr/bin/redis-server"  # a value keeps its own ':'
    assert info["total_net_output_bytes"] == "90000"
    assert not any(name.startswith("#") for name in info)
    assert "" not in info


def test_commandstats_calls_and_usec_per_command() -> None:
    stats = parse_commandstats(parse_info(INFO))
    assert stats == {
        "xadd": CommandStat(300, 1500),
        "client|setname": CommandStat(2, 3),
        "info": CommandStat(9, 900),
    }


def test_proc_stat_counts_from_the_last_parenthesis() -> None:
    # comm "(celery) (x)" holds spaces and parentheses; utime, stime, cutime, cstime = 100,
    # 50, 7, 3 ticks; ppid 12.
    line = "345 ((celery) (x)) S 12 345 345 0 -1 4194560 1 2 3 4 100 50 7 3 20 0 9 0 77"
    ppid, cpu_s = parse_proc_stat(line)
    assert ppid == 12
    assert cpu_s == pytest.approx(160 / CLOCK_TICKS)


def test_tree_sums_add_descendants_once_per_group() -> None:
    stats = {
        10: (1, 1.0),  # front
        11: (10, 0.5),  # its child
        12: (11, 0.25),  # and grandchild
        20: (1, 2.0),  # a worker
        21: (1, 3.0),  # another worker
        30: (1, 7.0),  # not measured
    }
    sums = tree_sums(stats, {"front": [10], "render workers": [20, 21], "gone": [99]})
    assert sums == {"front": 1.75, "render workers": 5.0, "gone": 0.0}


def _snapshot(wall_s: float, calls: int, out_bytes: int, main_cpu_s: float, reply: int) -> Snapshot:
    info = {
        "total_net_input_bytes": str(out_bytes // 2),
        "total_net_output_bytes": str(out_bytes),
        "aof_current_size": str(out_bytes // 4),
        "used_cpu_sys_main_thread": str(main_cpu_s / 2),
        "used_cpu_user_main_thread": str(main_cpu_s / 2),
    }
    commands = {
        "xadd": CommandStat(calls, calls * 5),
        "info": CommandStat(calls // 10, 100),
    }
    return Snapshot(wall_s, info, commands, {"redis": main_cpu_s, "front": wall_s}, reply)


def test_delta_leaves_out_the_bench_s_own_info_calls_and_replies() -> None:
    before = _snapshot(10.0, 100, 8000, 1.0, reply=500)
    after = _snapshot(12.0, 400, 20000, 1.5, reply=500)
    d = delta(before, after)
    assert d.wall_s == 2.0
    assert d.commands == {"xadd": 300}  # info left out
    assert d.usec == 1500
    assert d.net_in_bytes == 6000
    assert d.net_out_bytes == 12000 - 500  # before's INFO reply is not the stack's traffic
    assert d.aof_bytes == 3000
    assert d.redis_main_cpu_s == pytest.approx(0.5)
    assert d.cpu_s == {"redis": pytest.approx(0.5), "front": 2.0}
    assert delta(before, after, bench_reply_bytes=1500).net_out_bytes == 12000 - 1500


def test_minus_idle_takes_off_the_idle_rates_for_as_long() -> None:
    idle = delta(_snapshot(0.0, 0, 0, 0.0, 0), _snapshot(4.0, 40, 4000, 0.2, 0))
    load = delta(_snapshot(0.0, 0, 0, 0.0, 0), _snapshot(8.0, 1080, 20000, 1.4, 0))
    marginal = load.minus_idle(idle)
    assert marginal.commands == {"xadd": 1080 - 80}
    assert marginal.net_out_bytes == 20000 - 8000
    assert marginal.redis_main_cpu_s == pytest.approx(1.4 - 0.4)
    assert marginal.cpu_s["front"] == pytest.approx(8.0 - 8.0)
    assert marginal.total_commands == 1000


def test_units_at_a_budget() -> None:
    # idle 0.02 core, 1 ms of CPU per second per stream: one core holds 980 streams, half 480
    assert units_at(1.0, 0.02, 0.001) == pytest.approx(980)
    assert units_at(0.5, 0.02, 0.001) == pytest.approx(480)
    assert units_at(0.01, 0.02, 0.001) == 0.0  # idle alone past the budget
    assert math.isinf(units_at(1.0, 0.02, 0.0))


def test_book_hours_and_processes() -> None:
    # 10 chunks/s of 20 s of audio: 200 audio seconds per second = 200 book-hours per hour
    assert book_hours_per_hour(10.0, 20.0) == pytest.approx(200.0)
    assert processes_for(980, 80) == 13
    assert processes_for(960, 80) == 12
    assert processes_for(0, 80) == 1
    assert processes_for(50, math.inf) == 1


def test_mean_concurrency_counts_only_the_overlap_with_the_window() -> None:
    spans = [
        (0.0, 10.0),  # open the whole window: 1
        (2.0, 4.0),  # a fifth of it
        (-5.0, 1.0),  # ended 1 s into it: 0.1
        (9.0, 20.0),  # began 1 s before its end: 0.1
        (11.0, 12.0),  # after it: 0
    ]
    assert mean_concurrency(spans, 0.0, 10.0) == pytest.approx(1.4)
