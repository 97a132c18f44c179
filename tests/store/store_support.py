"""Helpers shared by the message-store tests (imported by name; pytest puts this directory on
sys.path)."""
import os


def cq_files(store_dir, topic, q):
    d = os.path.join(store_dir, "consumequeue", topic, str(q))
    return sorted(os.listdir(d)) if os.path.isdir(d) else []
