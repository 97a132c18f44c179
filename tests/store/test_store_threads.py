"""Concurrent producers and consumers in threads: every put gets a distinct, gap-free queue
offset and every consumer sees each queue in order."""
import threading


def test_concurrent_puts_and_gets(open_store):
    s = open_store(segment_size_bytes=1 << 20)
    s.create_topic("t", queues=4)
    errors = []
    done = threading.Event()

    def producer(k):
        try:
            for i in range(200):
                if i % 2:
                    s.put("t", b"%d-%d" % (k, i))
                else:
                    s.put_batch("t", [b"%d-%d-%d" % (k, i, j) for j in range(5)])
        except Exception as e:   # reported below
            errors.append(e)

    seen = {q: [] for q in range(4)}

    def consumer():
        try:
            offs = [0] * 4
            while not done.is_set() or any(offs[q] < s.max_offset("t", q) for q in range(4)):
                for q in range(4):
                    for m in s.get("t", q, offs[q], 64):
                        seen[q].append(m.queue_offset)
                        offs[q] = m.queue_offset + 1
        except Exception as e:
            errors.append(e)

    ps = [threading.Thread(target=producer, args=(k,)) for k in range(4)]
    c = threading.Thread(target=consumer)
    c.start()
    for p in ps:
        p.start()
    for p in ps:
        p.join()
    done.set()
    c.join()
    assert not errors
    total = 4 * (100 + 100 * 5)
    assert sum(s.max_offset("t", q) for q in range(4)) == total
    for q in range(4):
        assert seen[q] == list(range(s.max_offset("t", q)))
    bodies = [m.body for q in range(4) for m in s.iter_messages("t", q)]
    assert len(set(bodies)) == total
