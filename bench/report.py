"""The printed table and the targets of issue 7, from the results dict the sections fill in."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Row = tuple[str, str, str, str]  # metric, runq, peer / limit, ratio


def _get(results: dict[str, Any], path: str) -> Any:
    node: Any = results
    for key in path.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _num(value: Any, fmt: str = "{:,.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def _ratio(a: Any, b: Any) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def ratios(results: dict[str, Any]) -> dict[str, float]:
    """runq / peer for throughput (higher is better) and pickup (lower is better)."""
    e2e = _get(results, "throughput.runq_e2e.per_s")
    pairs = {
        "e2e_vs_pgqueuer": (e2e, _get(results, "throughput.pgqueuer.per_s")),
        "e2e_vs_pgqueuer_tuned": (e2e, _get(results, "throughput.pgqueuer_tuned.per_s")),
        "e2e_vs_procrastinate": (e2e, _get(results, "throughput.procrastinate.per_s")),
        "e2e_vs_raw_sql_best": (e2e, _get(results, "throughput.raw_sql.best_cycles_per_s")),
        "repository_vs_pgqueuer": (
            _get(results, "throughput.repository.complete_each.per_s"),
            _get(results, "throughput.pgqueuer.per_s"),
        ),
        "pickup_p50_vs_pgqueuer": (
            _get(results, "pickup.runq.p50_ms"),
            _get(results, "pickup.pgqueuer.p50_ms"),
        ),
        "pickup_p99_vs_pgqueuer": (
            _get(results, "pickup.runq.p99_ms"),
            _get(results, "pickup.pgqueuer.p99_ms"),
        ),
    }
    out = {k: round(a / b, 3) for k, (a, b) in pairs.items() if a is not None and b}
    # runq's /langgraph / `langgraph dev` (lower is better): reported, never a target
    for name, value in (_get(results, "langgraph_server.ratios") or {}).items():
        if value is not None:
            out[f"langgraph_server_{name}"] = value
    return out


Check = tuple[str, str, Callable[[dict[str, Any]], bool | None]]


def _le(path: str, limit: float) -> Callable[[dict[str, Any]], bool | None]:
    return lambda r: None if _get(r, path) is None else _get(r, path) <= limit


def _ge(path: str, limit: float) -> Callable[[dict[str, Any]], bool | None]:
    return lambda r: None if _get(r, path) is None else _get(r, path) >= limit


TARGETS: list[Check] = [
    ("e2e runs/s >= 1.0x PgQueuer jobs/s", "ratios.e2e_vs_pgqueuer", _ge("ratios.e2e_vs_pgqueuer", 1.0)),
    ("pickup p50 <= 3 ms", "pickup.runq.p50_ms", _le("pickup.runq.p50_ms", 3.0)),
    ("pickup p99 <= 10 ms", "pickup.runq.p99_ms", _le("pickup.runq.p99_ms", 10.0)),
    ("pickup p50 below PgQueuer's", "ratios.pickup_p50_vs_pgqueuer", _le("ratios.pickup_p50_vs_pgqueuer", 0.999)),
    ("pickup p99 below PgQueuer's", "ratios.pickup_p99_vs_pgqueuer", _le("ratios.pickup_p99_vs_pgqueuer", 0.999)),
    ("SSE p99 <= 50 ms at 1,000 subscribers", "sse.latency.p99_ms", _le("sse.latency.p99_ms", 50.0)),
    ("API RSS <= 200 MB with 1,000 streams", "sse.api_rss_mb", _le("sse.api_rss_mb", 200.0)),
    (
        "1 heartbeat statement per worker per interval",
        "cost.heartbeat.heartbeat_statements_per_interval",
        _le("cost.heartbeat.heartbeat_statements_per_interval", 1.05),
    ),
    ("heartbeat HOT updates >= 90 %", "cost.hot.hot_ratio_shipped", _ge("cost.hot.hot_ratio_shipped", 0.9)),
    (
        "claim p50 at 1M finished <= 1.2x at 1k",
        "cost.claim_latency.ratio_p50",
        _le("cost.claim_latency.ratio_p50", 1.2),
    ),
    (
        "streaming: 200 runs, 0 lost/dup/retried, p99 <= 250 ms",
        "streaming.largest_n_holding",
        _ge("streaming.largest_n_holding", 200),
    ),
    (
        "streaming: runq + PostgreSQL CPU <= 5 ms per run-second",
        "streaming.at_largest_n_holding.cpu_ms_per_run_s",
        _le("streaming.at_largest_n_holding.cpu_ms_per_run_s", 5.0),
    ),
    (
        "streaming: fsync'd commits/s at the largest N <= 1.2x at the smallest",
        "streaming.fsynced_growth",
        _le("streaming.fsynced_growth", 1.2),
    ),
    (
        "limits: POST /runs with every limit configured >= 0.9x none",
        "limits.throughput.ratio",
        _ge("limits.throughput.ratio", 0.9),
    ),
    (
        "limits: quiet tenant's create p99 beside a limited noisy one <= 2x alone",
        "limits.neighbour.limited.p99_vs_alone",
        _le("limits.neighbour.limited.p99_vs_alone", 2.0),
    ),
    (
        "limits: quiet tenant's pickup p99 beside a limited noisy one <= 2x alone",
        "limits.neighbour.limited.pickup_p99_vs_alone",
        _le("limits.neighbour.limited.pickup_p99_vs_alone", 2.0),
    ),
]


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for name, path, check in TARGETS:
        ok = check(results)
        out.append({"target": name, "value": _get(results, path), "met": ok})
    return out


def table(results: dict[str, Any]) -> str:
    r = results
    pgq = _get(r, "throughput.pgqueuer.per_s")
    rows: list[Row] = [
        ("THROUGHPUT (no-op, 20k, runs|jobs/s)", "runq", "peer / limit", "runq/peer"),
        ("runq e2e (worker processes) vs PgQueuer", _num(_get(r, "throughput.runq_e2e.per_s")), _num(pgq),
         _ratio(_get(r, "throughput.runq_e2e.per_s"), pgq)),
        ("runq e2e vs PgQueuer with batch_size 50 (not its default)", _num(_get(r, "throughput.runq_e2e.per_s")),
         _num(_get(r, "throughput.pgqueuer_tuned.per_s")),
         _ratio(_get(r, "throughput.runq_e2e.per_s"), _get(r, "throughput.pgqueuer_tuned.per_s"))),
        ("runq e2e vs Procrastinate", _num(_get(r, "throughput.runq_e2e.per_s")),
         _num(_get(r, "throughput.procrastinate.per_s")),
         _ratio(_get(r, "throughput.runq_e2e.per_s"), _get(r, "throughput.procrastinate.per_s"))),
        ("runq e2e vs raw SQL claim+ack (pgbench, best)", _num(_get(r, "throughput.runq_e2e.per_s")),
         _num(_get(r, "throughput.raw_sql.best_cycles_per_s")),
         _ratio(_get(r, "throughput.runq_e2e.per_s"), _get(r, "throughput.raw_sql.best_cycles_per_s"))),
    ]
    e2e, peer = _get(r, "throughput.runq_e2e"), _get(r, "throughput.pgqueuer")
    if e2e and peer:
        rows.append((
            "best configuration (processes x slots | x batch)",
            f"{e2e['processes']} x {e2e['concurrency']}", f"{peer['processes']} x {peer['batch_size']}", "",
        ))
    rows.append(("(PgQueuer: its documented default batch_size 10, best of its process counts)", "", "", ""))
    for variant in ("complete_each", "complete_many", "asyncpg_prepared"):
        value = _get(r, f"throughput.repository.{variant}.per_s")
        rows.append((f"repository layer: {variant} vs PgQueuer", _num(value), _num(pgq), _ratio(value, pgq)))
    for level in _get(r, "throughput.raw_sql.by_clients") or []:
        rows.append((f"raw SQL claim+ack, {level['clients']} clients", "", _num(level["cycles_per_s"]), ""))
    rows += [
        ("PICKUP (enqueue commit -> agent start, ms)", "", "", ""),
        ("p50 vs PgQueuer", _num(_get(r, "pickup.runq.p50_ms"), "{:.2f}"),
         _num(_get(r, "pickup.pgqueuer.p50_ms"), "{:.2f}"),
         _ratio(_get(r, "pickup.runq.p50_ms"), _get(r, "pickup.pgqueuer.p50_ms"))),
        ("p99 vs PgQueuer", _num(_get(r, "pickup.runq.p99_ms"), "{:.2f}"),
         _num(_get(r, "pickup.pgqueuer.p99_ms"), "{:.2f}"),
         _ratio(_get(r, "pickup.runq.p99_ms"), _get(r, "pickup.pgqueuer.p99_ms"))),
        ("SSE FAN-OUT (one API process)", "", "", ""),
        (f"subscribers: {_num(_get(r, 'sse.subscribers'))}; p50 / p99 ms",
         f"{_num(_get(r, 'sse.latency.p50_ms'), '{:.1f}')} / {_num(_get(r, 'sse.latency.p99_ms'), '{:.1f}')}",
         "<= 50 (p99)", ""),
        ("events/s delivered; API RSS MB", f"{_num(_get(r, 'sse.events_per_s_delivered'))}; "
         f"{_num(_get(r, 'sse.api_rss_mb'))}", "<= 200 MB", ""),
        ("all runs in lock-step (worst case): p50 / p99 ms",
         f"{_num(_get(r, 'sse.lockstep.latency.p50_ms'), '{:.1f}')} / "
         f"{_num(_get(r, 'sse.lockstep.latency.p99_ms'), '{:.1f}')}", "", ""),
        ("CREATE RATE: POST /runs req/s, 32 clients", _num(_get(r, "create.per_s")),
         f"p99 {_num(_get(r, 'create.latency.p99_ms'), '{:.0f}')} ms", ""),
        ("COST", "", "", ""),
        ("heartbeat statements / interval (64 runs held)",
         _num(_get(r, "cost.heartbeat.heartbeat_statements_per_interval"), "{:.2f}"), "<= 1", ""),
        ("all worker SQL / round trips per interval",
         f"{_num(_get(r, 'cost.heartbeat.sql_statements_per_interval'), '{:.1f}')} / "
         f"{_num(_get(r, 'cost.heartbeat.round_trips_per_interval'), '{:.1f}')}", "", ""),
        ("heartbeat HOT ratio (shipped / with locked_until index)",
         _num(_get(r, "cost.hot.hot_ratio_shipped"), "{:.1%}"),
         _num(_get(r, "cost.hot.hot_ratio_locked_until_index"), "{:.1%}"), ""),
        (f"claim p50 ms, {_num(_get(r, 'cost.claim_latency.large.finished'))} vs "
         f"{_num(_get(r, 'cost.claim_latency.small.finished'))} finished",
         _num(_get(r, "cost.claim_latency.large.p50_ms"), "{:.2f}"),
         _num(_get(r, "cost.claim_latency.small.p50_ms"), "{:.2f}"),
         _num(_get(r, "cost.claim_latency.ratio_p50"), "{:.2f}x")),
        ("claim p50 ms, runs in threads (none blocked) vs lone runs",
         _num(_get(r, "threads.claim_latency_no_busy.with_threads.p50_ms"), "{:.2f}"),
         _num(_get(r, "threads.claim_latency_no_busy.without.p50_ms"), "{:.2f}"),
         _num(_get(r, "threads.claim_latency_no_busy.ratio_p50"), "{:.2f}x")),
        (f"claim p50 ms, runs in threads ({_num(_get(r, 'threads.claim_latency.blocked_at_head'))} blocked "
         "at the head) vs lone runs",
         _num(_get(r, "threads.claim_latency.with_threads.p50_ms"), "{:.2f}"),
         _num(_get(r, "threads.claim_latency.without.p50_ms"), "{:.2f}"),
         _num(_get(r, "threads.claim_latency.ratio_p50"), "{:.2f}x")),
    ]
    rows += _streaming_rows(_get(r, "streaming"))
    rows += _framework_rows("PydanticAI", _get(r, "frameworks.pydantic_ai"))
    rows += _framework_rows("OpenAI Agents SDK", _get(r, "frameworks.openai_agents"))
    rows += _langgraph_rows(_get(r, "frameworks_langgraph"))
    rows += _limits_rows(_get(r, "limits"))
    rows += _ai_sdk_rows(_get(r, "frontends_ai_sdk"))
    rows += _ag_ui_rows(_get(r, "frontends_ag_ui"))
    rows += _langgraph_server_rows(_get(r, "langgraph_server"))
    width = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = []
    for row in rows:
        heading = row[1:] == ("", "", "") or row[0].isupper()
        if heading:
            lines.append("")
        lines.append("  ".join(cell.ljust(width[i]) if i == 0 else cell.rjust(width[i]) for i, cell in enumerate(row)))
    lines.append("")
    if results["meta"].get("smoke"):
        lines.append("(smoke run: tiny counts; the targets are judged on the full run)")
    for t in results.get("targets", []):
        mark = {True: "MET ", False: "MISS", None: "n/a "}[t["met"]]
        lines.append(f"[{mark}] {t['target']}: {t['value']}")
    return "\n".join(lines)


def _streaming_rows(section: dict[str, Any] | None) -> list[Row]:
    if not section:
        return []
    rows: list[Row] = [(
        f"STREAMING ({section['per_s']:g} tokens/s x {section['seconds']:g} s, {section['workers']} workers, 1 API)",
        "", "", "",
    )]
    for m in section["sweep"]:
        n = m["runs"]
        if "tokens" not in m:
            rows.append((f"N={n}: failed", m.get("error", "")[:60], "", ""))
            continue
        t, cpu, c = m["tokens"], m["cpu_ms_per_run_s"], m["commits_per_run_s"]
        rows += [
            (f"N={n}: tokens lost / duplicated / out of order; retried attempts",
             f"{t['lost']} / {t['duplicated']} / {t['out_of_order']}; {m['retried_attempts']}", "0", ""),
            (f"N={n}: token -> subscriber p50 / p99 ms",
             f"{_num(m['latency'].get('p50_ms'), '{:.0f}')} / {_num(m['latency'].get('p99_ms'), '{:.0f}')}",
             "<= 250 (p99)", ""),
            (f"N={n}: CPU ms per run-s API / workers / PostgreSQL (harness)",
             f"{cpu['api']:.1f} / {cpu['workers']:.1f} / {cpu['postgres']:.1f} ({cpu['harness']:.1f})",
             f"sum {cpu['runq_and_postgres']:.1f}", ""),
            (f"N={n}: commits per run-s all / fsync'd; peak connections",
             f"{c['all']:.1f} / {_num(c['fsynced'], '{:.1f}')}; {m['connections']['peak']}",
             f"{m['machine']['others_cores']:.2f} cores used by others", ""),
        ]
    rows.append(("largest N that holds the targets", _num(section["largest_n_holding"]), ">= 200", ""))
    return rows


def _framework_rows(framework: str, section: dict[str, Any] | None) -> list[Row]:
    """bench/framework_steps.py: an adapter's agent through runq against the same agent bare."""
    if not section:
        return []
    replay = section["replay"]
    rows: list[Row] = [(f"FRAMEWORKS: {framework} through runq vs bare (ms per step)", "runq", "bare", "runq/bare")]
    for label, s in (("1 run", section), (f"{_get(section, 'concurrent.runs')} runs at once", section.get("concurrent"))):
        if not s:
            continue
        for kind, what in (("model", "model request"), ("tool", "tool call")):
            added = f"runq adds {_num(s.get(f'overhead_{kind}_step_ms'), '{:.2f}')} ms"
            if s is not section:  # runs at once: also the machine's time per step, each run's share
                added += f", {_num(s.get(f'overhead_{kind}_step_share_ms'), '{:.2f}')} ms a step"
            rows.append((f"per {what}, {label} ({added})", _num(s[f"per_{kind}_step_ms"]["runq"], "{:.2f}"),
                         _num(s[f"per_{kind}_step_ms"]["bare"], "{:.2f}"), _num(s[f"ratio_{kind}_step"], "{:.2f}x")))
    rows += [
        ("one client's commit on the same server (ms), the floor of a durable step",
         _num(section.get("commit_ms"), "{:.3f}"), "", ""),
        (f"replay of {replay['replayed_steps']} steps after a crash at tool {replay['failed_at_tool']} (ms)",
         _num(replay["replay_ms"], "{:.0f}"), f"live {_num(replay['first_attempt_to_step_ms'], '{:.0f}')}",
         _num(replay["ratio_replay_to_live"], "{:.2f}x")),
    ]  # fmt: skip
    return rows


def _langgraph_rows(section: dict[str, Any] | None) -> list[Row]:
    """bench/frameworks_langgraph.py: runq's saver vs LangGraph's AsyncPostgresSaver."""
    if not section:
        return []
    graph = next(k for k in section if k.startswith("graph_"))
    steps = next(k for k in section if k.startswith("rows_after_"))
    rows: list[Row] = [("LANGGRAPH SAVER (runq vs AsyncPostgresSaver, psycopg)", "runq", "LangGraph", "runq/peer")]
    for label, key in (("checkpoint put", "put"), ("checkpoint get", "get"), (graph.replace("_", " "), graph)):
        for q in ("p50", "p99"):
            runq, peer = section[key]["runq"][f"{q}_ms"], section[key]["langgraph_psycopg"][f"{q}_ms"]
            rows.append((f"{label} {q} ms", _num(runq, "{:.2f}"), _num(peer, "{:.2f}"), _ratio(runq, peer)))
    rows.append((
        f"checkpoint rows per thread, {steps.replace('_', ' ')} (keep {section['keep']})",
        _num(section[steps]["runq"]["checkpoints"]),
        _num(section[steps]["langgraph_psycopg"]["checkpoints"]),
        "",
    ))
    rows.append(("LangGraph's asyncpg saver", section["asyncpg_saver"], "", ""))
    return rows


def _limits_rows(section: dict[str, Any] | None) -> list[Row]:
    if not section:
        return []
    rows: list[Row] = [
        ("TENANT LIMITS", "", "", ""),
        ("POST /runs req/s, 32 clients of 8 tenants: every limit configured vs none",
         _num(_get(section, "throughput.limited.per_s")), _num(_get(section, "throughput.none.per_s")),
         _num(_get(section, "throughput.ratio"), "{:.2f}x")),
        ("  the same, all 32 clients of one tenant (its creates take turns on its bucket)",
         _num(_get(section, "throughput.one_tenant_limited.per_s")),
         _num(_get(section, "throughput.one_tenant_none.per_s")),
         _num(_get(section, "throughput.one_tenant_ratio"), "{:.2f}x")),
        ("quiet tenant's create p50 / p99 ms, alone (two APIs, one worker)",
         _p50_p99(section, "neighbour.alone.latency"), "", ""),
        ("quiet tenant's pickup p50 / p99 ms, alone", _p50_p99(section, "neighbour.alone.pickup"), "", ""),
    ]  # fmt: skip
    for case, label in (("unlimited", "noisy tenant unlimited"), ("limited", "noisy tenant limited"),
                        ("hammer", "limited, ignoring Retry-After")):  # fmt: skip
        noisy = _get(section, f"neighbour.{case}.noisy") or {}
        rows.append((
            f"  beside 16 noisy clients, {label} (created {noisy.get('created', '?')}, refused {noisy.get('refused', '?')})",
            _p50_p99(section, f"neighbour.{case}.latency"),
            "<= 2x (p99)", _num(_get(section, f"neighbour.{case}.p99_vs_alone"), "{:.2f}x"),
        ))
        rows.append((
            "    its pickup p50 / p99 ms", _p50_p99(section, f"neighbour.{case}.pickup"),
            "<= 2x (p99)", _num(_get(section, f"neighbour.{case}.pickup_p99_vs_alone"), "{:.2f}x"),
        ))
    return rows


def _p50_p99(section: dict[str, Any], path: str) -> str:
    return f"{_num(_get(section, f'{path}.p50_ms'), '{:.1f}')} / {_num(_get(section, f'{path}.p99_ms'), '{:.1f}')}"


def _ai_sdk_rows(section: dict[str, Any] | None) -> list[Row]:
    """bench/frontends_ai_sdk.py: the AI SDK's chat stream against native SSE, same live runs."""
    if not section:
        return []
    native, ai_sdk = section["native"], section["ai_sdk"]
    rows: list[Row] = [
        ("FRONTENDS: AI SDK chat stream vs native SSE (API CPU)", "AI SDK", "native", "AI SDK/native"),
        ("CPU us per runq event", _num(ai_sdk["cpu_us_per_event"], "{:.0f}"), _num(native["cpu_us_per_event"], "{:.0f}"),
         _num(section["ratio_per_event"], "{:.2f}x")),
        ("CPU us per frame", _num(ai_sdk["cpu_us_per_frame"], "{:.0f}"), _num(native["cpu_us_per_frame"], "{:.0f}"),
         _ratio(ai_sdk["cpu_us_per_frame"], native["cpu_us_per_frame"])),
    ]
    return rows + _ai_sdk_resume_rows(section.get("resume"))


def _ai_sdk_resume_rows(resume: dict[str, Any] | None) -> list[Row]:
    if not resume:
        return []
    ai_sdk, native = resume["ai_sdk"]["last_byte_ms"], resume["native"]["last_byte_ms"]
    return [(f"resume of a {resume['events']:,}-event answer: ms to the last byte", _num(ai_sdk, "{:.0f}"),
             _num(native, "{:.0f}"), _ratio(ai_sdk, native))]


def _ag_ui_rows(section: dict[str, Any] | None) -> list[Row]:
    """bench/frontends_ag_ui.py: AG-UI replays against native SSE, the same finished runs."""
    if not section:
        return []
    native, ag_ui = section["native"], section["ag_ui"]
    return [
        ("FRONTENDS: AG-UI stream vs native SSE (API CPU)", "AG-UI", "native", "AG-UI/native"),
        ("CPU us per frame", _num(ag_ui["cpu_us_per_frame"], "{:.0f}"), _num(native["cpu_us_per_frame"], "{:.0f}"),
         _num(section["ratio_per_frame"], "{:.2f}x")),
        ("CPU us per runq event", _num(ag_ui["cpu_us_per_event"], "{:.0f}"), _num(native["cpu_us_per_event"], "{:.0f}"),
         _num(section["ratio_per_event"], "{:.2f}x")),
    ]


def _langgraph_server_rows(section: dict[str, Any] | None) -> list[Row]:
    """bench/langgraph_server.py: runq's /langgraph against `langgraph dev`, the same graph."""
    if not section:
        return []
    if "skipped" in section:
        return [("LANGGRAPH SERVER (runq /langgraph vs langgraph dev): skipped", "", "", ""),
                (f"  {section['skipped']}", "", "", "")]  # fmt: skip
    shape, runq, ref = section["shape"], section["runq"], section["reference"]
    rows: list[Row] = [(
        f"LANGGRAPH SERVER: runq /langgraph vs langgraph dev ({shape['tokens']} tokens, "
        f"{shape['token_ms']:g} ms apart)", "runq", "langgraph dev", "runq/ref",
    )]  # fmt: skip
    for phase, label in (("one_at_a_time", "1 run at a time"),
                         ("concurrent", f"{shape['concurrency']} runs at once")):  # fmt: skip
        for what, name in (("first_token", "first token"), ("end", "end")):
            for q in ("p50", "p99"):
                a, b = runq[phase][what][f"{q}_ms"], ref[phase][what][f"{q}_ms"]
                rows.append((f"{label}: {name} {q} ms", _num(a), _num(b), _ratio(a, b)))
        a, b = runq[phase]["cpu_us_per_token"], ref[phase]["cpu_us_per_token"]
        rows.append((f"{label}: server CPU us per streamed token", _num(a), _num(b), _ratio(a, b)))
    a, b = runq.get("idle_cpu_ms_per_s"), ref.get("idle_cpu_ms_per_s")
    rows.append(("server CPU ms per second with no run (counted in the rows above)", _num(a, "{:.1f}"),
                 _num(b, "{:.1f}"), _ratio(a, b)))  # fmt: skip
    for kind, label in (("live", "at once"), ("after_end", "after the run's end")):
        a, b = runq["reconnect"][kind], ref["reconnect"][kind]
        rows.append((
            f"reconnect after {shape['cut_after']} tokens, {label}: ms to the last byte p50 (whole answers)",
            f"{_num(a['p50_ms'])} ({a['whole_answers']}/{a['samples']})",
            f"{_num(b['p50_ms'])} ({b['whole_answers']}/{b['samples']})", _ratio(a["p50_ms"], b["p50_ms"]),
        ))  # fmt: skip
    return rows
