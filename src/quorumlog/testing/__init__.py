"""Test harnesses for quorumlog: the hand-driven Raft cluster (cluster.py), the deterministic
Raft simulator (sim.py) and its soak runner (soak.py: `python -m quorumlog.testing.soak`)."""
