"""The worker process: claims runs under a lease, runs their agents, finishes them."""
