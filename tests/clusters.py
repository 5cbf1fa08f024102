"""LocalCluster settings shared by the tests that start one."""

from __future__ import annotations

# 2 worker processes, no dashboard, and the scheduler's plain HTTP server (which
# dashboard_address=None still starts, on port 8787) on a free port: a shared machine
# may hold 8787, and distributed then leaks a socket (a ResourceWarning, an error here)
CLUSTER_OPTIONS = {
    "n_workers": 2,
    "processes": True,
    "dashboard_address": None,
    "worker_dashboard_address": None,
    "scheduler_kwargs": {"dashboard_address": ":0"},
}
