"""What `quorumlog bench` prints: the live progress line only on a terminal, the summary table,
and three lines per result when the terminal is too narrow for the table."""
import io

from rich.console import Console

from quorumlog.bench import report
from quorumlog.bench.progress import ProgressLine


def test_progress_line_only_on_a_terminal():
    plain = Console(file=io.StringIO())
    assert ProgressLine(plain).enabled is False
    with ProgressLine(plain).phase("store async", total=10) as ph:
        ph.add(10)
    assert plain.file.getvalue() == ""
    tty = Console(file=io.StringIO(), force_terminal=True, width=100)
    line = ProgressLine(tty)
    assert line.enabled is True
    with line.phase("store async", total=1000) as ph:
        slots = ph.use_slots(2)
        slots[0] += 300
        slots[1] += 200
        assert ph.done == 500
    out = tty.file.getvalue()
    assert "/1,000 msgs" in out and "store async" in out
    assert ProgressLine(plain, enabled=True).enabled is True      # --progress forces it


def test_narrow_terminal_gets_blocks_wide_output_gets_the_table(bench):
    doc = bench("log", "--count", "200", "--batch", "100").doc
    narrow = Console(file=io.StringIO(), width=90)
    report.print_summary(narrow, doc)
    text = narrow.file.getvalue()
    assert "log append_batch async 1 KiB x1: 200 msgs" in text
    assert "latency per batch of 100: p50" in text
    assert all(len(ln) <= 90 for ln in text.splitlines())
    wide = Console(file=io.StringIO(), width=250)
    report.print_summary(wide, doc, wide=True)
    assert "msg/flush" in wide.file.getvalue().splitlines()[3]      # the table's header row


def test_default_table_fits_120_columns_wide_has_every_column(bench):
    doc = bench("log", "--count", "200", "--batch", "100").doc
    # the widest rows the suite prints: a cluster row with a goal, a failover row
    doc["results"] = [*doc["results"], *(dict(doc["results"][0], workload=w, op=op,
                                              goal={"higher_is_better": True, "ratio": 0.123,
                                                    "target": 500000, "unit": "msg/s"})
                                         for w, op in (("cluster", "produce_batch"),
                                                       ("failover", "kill_to_next_ack")))]
    measure = Console(width=10_000, file=io.StringIO()).measure
    assert measure(report.summary_table(doc, wide=False)).maximum <= report.DEFAULT_WIDTH
    assert measure(report.summary_table(doc, wide=True)).maximum > report.DEFAULT_WIDTH
    pipe = Console(file=io.StringIO(), width=260)        # what `make bench` prints into
    report.print_summary(pipe, doc)
    header = next(ln for ln in pipe.file.getvalue().splitlines() if "msg/s" in ln)
    assert "p99" in header and "latency of" in header and "msg/flush" not in header
    wide = Console(file=io.StringIO(), width=260)
    report.print_summary(wide, doc, wide=True)
    assert "msg/flush" in wide.file.getvalue() and "vs goal" in wide.file.getvalue()
