"""``make failover``: runq on a Patroni pair (a primary and a synchronous standby, etcd as the
DCS) behind a host list, under keyed creates and SSE followers; the primary SIGKILLed
mid-load, then a planned switchover; figures in bench/results/failover.json (DESIGN §20)."""
