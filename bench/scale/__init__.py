"""The multi-host harness (``make scale``): one PostgreSQL, API and worker "hosts" in network
namespaces of the harness's own on one bridge, 10,000 SSE subscribers, a network partition.

``python -m bench.scale`` builds the namespaces (:mod:`bench.scale.netns`), runs the controller
(:mod:`bench.scale.run`) inside the load generator's namespace and tears everything down at
the end, even on failure. Figures go to ``bench/results/scale.json``.
"""
