"""RDMA verification: pair scheduling, GID resolution, perftest runs, thresholds, baselines."""
