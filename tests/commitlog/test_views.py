"""Views the log hands out survive close(), truncate_after(), segment deletion and the log
object itself being dropped: no crash (no BufferError, no SIGSEGV), and the data stays
readable from the view (architecture.md "Views").

Each scenario runs in a subprocess so a segfault shows up as a failed test, not a dead run.
"""
import subprocess
import sys
import textwrap


from cl_support import SEG, IDX_ENTRIES


PRELUDE = textwrap.dedent(f"""
    import gc, os, sys
    from quorumlog import errors, format as qf
    from quorumlog.commitlog import CommitLog
    path = sys.argv[1]
    def open_log():
        return CommitLog(path, segment_size_bytes={SEG}, index_file_entries={IDX_ENTRIES})
    def fill(log, n=60):
        for k in range(n):
            log.append("t", bytes([k % 250 + 1]) * 3000, term=1)
""")


def run(tmp_path, body):
    code = PRELUDE + textwrap.dedent(body) + "\nprint('DONE')\n"
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("DONE"), \
        f"exit {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}"


def test_views_survive_close(tmp_path):
    run(tmp_path, """
        log = open_log(); fill(log)
        view, n = log.read(1, 10)
        rec = log.record_at(log.position_of(3))
        want, want_rec = bytes(view), bytes(rec)
        log.close()
        assert bytes(view) == want and bytes(rec) == want_rec
        assert qf.decode_record(rec).index == 3
        del log; gc.collect()
        assert bytes(view) == want
        # a slice of a view outlives the view
        part = view[100:200]
        del view; gc.collect()
        assert bytes(part) == want[100:200]
    """)


def test_views_survive_truncate(tmp_path):
    run(tmp_path, """
        log = open_log(); fill(log)
        last_seg_start = log.position_of(60) - log.position_of(60) % %(SEG)d
        view, n = log.read(55, 61)
        early, m = log.read(1, 3)
        want_early = bytes(early)
        assert log.position_of(55) >= last_seg_start
        log.truncate_after(2)                 # drops whole segments the view points into
        assert len(bytes(view)) == len(view)  # readable, no crash (content may be zeroed)
        assert bytes(early) == want_early     # records that survived are unchanged
        fill(log, 30)                         # the freed positions are reused
        bytes(view)
        log.close()
        bytes(view)
    """.replace("%(SEG)d", str(SEG)))


def test_views_survive_segment_deletion(tmp_path):
    run(tmp_path, """
        log = open_log(); fill(log, 80)
        segs = log.segments()
        assert len(segs) >= 3
        view, n = log.read(1, 5)
        rec = log.record_at(0)
        want, want_rec = bytes(view), bytes(rec)
        deleted = log.delete_segments_before(segs[2][0])
        assert deleted == 2
        assert not os.path.exists(segs[0][1]) and not os.path.exists(segs[1][1])
        assert log.min_position == segs[2][0]
        assert bytes(view) == want and bytes(rec) == want_rec
        try:
            log.record(1)
            raise AssertionError("record 1 still readable after its segment was deleted")
        except errors.IndexOutOfRangeError:
            pass
        assert log.first_index > 1
        log.close()
        assert bytes(view) == want
        log = open_log()
        assert log.min_position == segs[2][0] and log.first_index > 1
        log.close()
        del log; gc.collect()
        assert bytes(view) == want
    """)


def test_views_survive_crash_drop(tmp_path):
    run(tmp_path, """
        log = open_log(); fill(log, 10)
        view, n = log.read(1, 11)
        want = bytes(view)
        log.crash_for_testing()
        assert bytes(view) == want
        log = open_log()
        assert bytes(log.read(1, 11)[0]) == want
        log.close()
        assert bytes(view) == want
    """)
