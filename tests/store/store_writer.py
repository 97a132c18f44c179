"""Writer process for test_store_kill.py: puts batches round-robin into a store forever and
reports on stdout what is guaranteed durable (sync mode: every put, once put_batch returned;
async mode: everything before a flush() that returned). The test kills it with SIGKILL."""
import sys

import quorumlog


def main(path, flush):
    s = quorumlog.open(path, flush=flush, segment_size_bytes=1 << 16,
                       consume_queue_file_entries=64, background=False, environ={})
    s.create_topic("k", queues=4)
    out = sys.stdout
    i = 0
    while True:
        n = 1 + i % 5
        r = s.put_batch("k", [b"msg-%d-" % (i + j) + b"p" * ((i + j) % 300) for j in range(n)])
        if flush == "sync":
            for j in range(n):
                out.write(f"ACK {i + j} {r.queue_ids[j]} {r.queue_offsets[j]}\n")
        else:
            for j in range(n):
                out.write(f"PUT {i + j} {r.queue_ids[j]} {r.queue_offsets[j]}\n")
            if i % 7 == 0:
                s.flush()
                out.write(f"FLUSHED {i + n}\n")
        out.flush()
        i += n


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
