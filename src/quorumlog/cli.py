"""The `quorumlog` command: benchmarks and store inspection for operators.

Library code never configures logging; this entry point does.
"""
import argparse
import logging
import os
import pathlib
import sys


def _cmd_bench(args):
    import pytest
    bench_dir = pathlib.Path(args.bench_dir or pathlib.Path.cwd() / "bench")
    if not bench_dir.is_dir():
        print(f"quorumlog bench: no benchmark folder at {bench_dir} (run from a source checkout "
              "or pass --bench-dir)", file=sys.stderr)
        return 2
    return pytest.main([str(bench_dir), "-q", "--benchmark-only", *args.pytest_args])


def _segment_size(args):
    """--segment-size-bytes if given, else what the store's checkpoint records (a store opened
    with another segment size is refused by the log, so guessing the default is wrong)."""
    if args.segment_size_bytes is not None:
        return args.segment_size_bytes
    from .format import decode_checkpoint
    cp = pathlib.Path(args.path) / "checkpoint"
    if cp.exists():
        return decode_checkpoint(cp.read_bytes(), str(cp)).segment_size_bytes
    return 1 << 30


def _cmd_info(args):
    from .commitlog import CommitLog
    with CommitLog(args.path, segment_size_bytes=_segment_size(args)) as log:
        for k, v in sorted(log.stats().items()):
            print(f"{k}: {v}")
        print(f"first_index: {log.first_index}\nlast_index: {log.last_index}")
        print(f"end_position: {log.end_position}\ncommitted_index: {log.committed_index}")
    return 0


def _cmd_verify(args):
    from .commitlog import CommitLog
    from .errors import CorruptLogError
    try:
        with CommitLog(args.path, segment_size_bytes=_segment_size(args)) as log:
            log.verify()
            print(f"ok: records {log.first_index}..{log.last_index} verified")
    except CorruptLogError as e:
        print(f"corrupt: {e} (file {e.path}, offset {e.offset})", file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    logging.basicConfig(level=os.environ.get("QUORUMLOG_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    p = argparse.ArgumentParser(prog="quorumlog", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bench", help="run the benchmarks (pytest-benchmark)")
    b.add_argument("--bench-dir")
    b.add_argument("pytest_args", nargs=argparse.REMAINDER)
    b.set_defaults(func=_cmd_bench)
    for name, func, text in (("info", _cmd_info, "print a commit log's state"),
                             ("verify", _cmd_verify, "CRC-check every record of a commit log")):
        c = sub.add_parser(name, help=text)
        c.add_argument("path", help="the store directory")
        c.add_argument("--segment-size-bytes", type=int, default=None,
                       help="default: as recorded in the store's checkpoint")
        c.set_defaults(func=func)
    args = p.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
