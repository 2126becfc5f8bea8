"""``make failover``'s pure logic: what its records mean, and the Patroni settings it runs."""

from __future__ import annotations

from pathlib import Path

from bench.failover import figures
from bench.failover.figures import Stream, Timeline
from bench.failover.patroni import DCS, Node, node_config


def test_recovery_is_measured_from_the_fault_and_from_the_first_commit() -> None:
    t = Timeline(fault_at=100.0, promoted_at=110.5, writable_at=112.0, created_at=112.3, ready_at=111.0)
    assert figures.recovery(t) == {
        "takeover_s": 10.5,
        "writable_s": 12.0,
        "creates_back_after_writable_s": 0.3,
        "readyz_back_after_writable_s": 0.0,  # ready before the first commit: no wait at all
    }
    assert figures.recovery(Timeline(100.0, None, None, None, None))["writable_s"] is None


def test_an_acknowledged_run_the_database_lacks_is_lost() -> None:
    assert figures.acknowledged_but_lost(["a", "b", "b", "c"], {"a", "c", "z"}) == ["b"]


def test_an_event_seen_is_lost_when_its_seq_is_missing_or_holds_another_event() -> None:
    streams = [Stream("r1", [(1, "run.queued"), (2, "run.started")]), Stream("r2", [(1, "run.queued")])]
    stored = {"r1": {1: "run.queued", 2: "tool.call"}}
    assert figures.seen_but_lost(streams, stored) == 2


def test_a_resumed_stream_is_gapless_only_with_every_seq_once_in_order() -> None:
    resumed = Stream("r", [(1, "run.queued"), (2, "run.started"), (3, "run.completed")], connections=2)
    assert resumed.resumed and resumed.finished and resumed.gapless()
    assert not Stream("r", [(1, "run.queued"), (3, "run.completed")]).gapless()
    assert not Stream("r", [(1, "run.queued"), (1, "run.queued")]).gapless()
    summary = figures.streams_summary([resumed, Stream("s", [(2, "x")], connections=1)])
    assert summary == {"followed": 2, "finished": 1, "resumed": 1, "with_gap_or_repeat": 1}


def test_runs_in_flight_are_those_followed_across_the_fault() -> None:
    before = Stream("a", [(1, "run.queued"), (2, "run.completed")], arrivals=[1.0, 2.0])  # done before
    across = Stream("b", [(1, "run.queued"), (2, "tool.call"), (3, "run.completed")], arrivals=[9.0, 21.5, 22.0])
    slow = Stream("c", [(1, "run.queued"), (2, "run.completed")], arrivals=[9.5, 23.0])
    after = Stream("d", [(1, "run.queued")], arrivals=[25.0])  # created after the fault
    # ended before writes were back: its last events were stored before the fault
    ended = Stream("f", [(1, "run.queued"), (2, "run.completed")], arrivals=[9.0, 12.0])
    found = figures.in_flight_back([before, across, slow, after, ended], fault_at=10.0, writable_at=20.0)
    assert found == {"runs": 2, "max_s": 3.0}
    stuck = Stream("e", [(1, "run.queued")], arrivals=[9.0])  # nothing since: no figure to give
    assert figures.in_flight_back([across, stuck], fault_at=10.0, writable_at=20.0) == {"runs": 2, "max_s": None}


def test_runs_started_twice() -> None:
    assert figures.started_twice({"a": 1, "b": 2, "c": 3}) == ["b", "c"]


def test_the_table_has_a_column_per_round() -> None:
    streams = {"followed": 3, "resumed": 2, "with_gap_or_repeat": 0}
    rounds = {
        "kill": {"takeover_s": 10.2, "acknowledged_but_lost": [], "streams": streams},
        "switchover": {"takeover_s": None},
    }
    lines = figures.table(rounds).splitlines()
    assert lines[0] == "| figure | kill | switchover |"
    assert "| Patroni's takeover (s after the fault) | 10.2 | n/a |" in lines
    assert "| acknowledged but lost | 0 | n/a |" in lines
    assert "| streams followed / resumed / with a gap | 3 / 2 / 0 | n/a |" in lines


def test_patroni_runs_strict_synchronous_replication_on_loopback() -> None:
    node = Node("pg1", 55432, 58008, Path("/tmp/x/pg1"), Path("/tmp/x/pg1.yml"))
    config = node_config(node, etcd="127.0.0.1:2379", run_dir=Path("/tmp/x"))
    dcs = config["bootstrap"]["dcs"]
    assert dcs["synchronous_mode"] is True and dcs["synchronous_mode_strict"] is True
    assert DCS["ttl"] >= DCS["loop_wait"] + 2 * DCS["retry_timeout"]  # Patroni refuses less
    assert config["postgresql"]["listen"] == "127.0.0.1:55432"
    assert config["restapi"]["listen"] == "127.0.0.1:58008"
    assert config["etcd3"] == {"hosts": ["127.0.0.1:2379"]}
