"""The `quorumlog` command: benchmarks and store inspection for operators.

A click group: `bench` (quorumlog.bench.command), `info`, `verify`; servers and repair tools
join it as further subcommands (`main.add_command`). Library code never configures logging;
this entry point does.
"""
import logging
import os
import pathlib

import click

from . import __version__


@click.group("quorumlog", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="quorumlog",
                      message="%(prog)s %(version)s")
def cli():
    """quorumlog: benchmarks and store inspection."""
    logging.basicConfig(level=os.environ.get("QUORUMLOG_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")


def _segment_size(path, segment_size_bytes):
    """--segment-size-bytes if given, else what the store's checkpoint records (a store opened
    with another segment size is refused by the log, so guessing the default is wrong)."""
    if segment_size_bytes is not None:
        return segment_size_bytes
    from .format import decode_checkpoint
    cp = pathlib.Path(path) / "checkpoint"
    if cp.exists():
        return decode_checkpoint(cp.read_bytes(), str(cp)).segment_size_bytes
    return 1 << 30


_path_arg = click.argument("path", type=click.Path(file_okay=False))
_segment_opt = click.option("--segment-size-bytes", type=int, default=None,
                            help="default: as recorded in the store's checkpoint")


@cli.command()
@_path_arg
@_segment_opt
def info(path, segment_size_bytes):
    """Print a commit log's state. PATH: the store directory."""
    from .commitlog import CommitLog
    with CommitLog(path, segment_size_bytes=_segment_size(path, segment_size_bytes)) as log:
        for k, v in sorted(log.stats().items()):
            click.echo(f"{k}: {v}")
        click.echo(f"first_index: {log.first_index}\nlast_index: {log.last_index}")
        click.echo(f"end_position: {log.end_position}\ncommitted_index: {log.committed_index}")


@cli.command()
@_path_arg
@_segment_opt
@click.pass_context
def verify(ctx, path, segment_size_bytes):
    """CRC-check every record of a commit log. PATH: the store directory.

    Exit code 1 names the first damaged record's file and offset."""
    from .commitlog import CommitLog
    from .errors import CorruptLogError
    try:
        with CommitLog(path, segment_size_bytes=_segment_size(path, segment_size_bytes)) as log:
            log.verify()
            click.echo(f"ok: records {log.first_index}..{log.last_index} verified")
    except CorruptLogError as e:
        click.echo(f"corrupt: {e} (file {e.path}, offset {e.offset})", err=True)
        ctx.exit(1)


def _add_bench():
    from .bench.command import bench
    cli.add_command(bench)


_add_bench()


def main(argv=None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    try:
        rv = cli.main(args=argv, prog_name="quorumlog", standalone_mode=False)
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.Abort:
        click.echo("Aborted!", err=True)
        return 1
    return rv if isinstance(rv, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
