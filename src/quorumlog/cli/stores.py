"""Which store directories a path given to `info`, `verify` or `repair` stands for: the store
itself, or every group's store (or one) of a replica directory of many Raft groups
(groups.json, groups/<g>/: node/groups.py), and the error those commands exit 2 with."""
import os

import click

from ..errors import ConfigError
from ..node.groups import LAYOUT_FILE, group_dir, groups_in

EXIT_USAGE = 2           # bad arguments, not a store, a file that cannot be read


class InspectionError(click.ClickException):
    """A store that cannot be inspected: one line on stderr, exit code 2, no traceback."""
    exit_code = EXIT_USAGE

    def show(self, file=None):
        click.echo(f"quorumlog: {self.format_message()}", err=True)


def store_dirs(path, group) -> list[tuple[int | None, str]]:
    """The store directories PATH stands for: [(None, PATH)] for a single store, else
    [(g, PATH/groups/g)] for every group (or the one --group names) of a multi-group
    replica directory. Exit 2 (InspectionError) for a group it does not hold."""
    try:
        n = groups_in(path) if os.path.isdir(path) else None
    except ConfigError as exc:
        raise InspectionError(str(exc)) from None
    if n is None:
        if group not in (None, 0):
            raise InspectionError(f"{path} holds a single group (no {LAYOUT_FILE}): there is "
                                  f"no group {group}")
        return [(None, os.fspath(path))]
    if group is not None and group >= n:
        raise InspectionError(f"{path} holds {n} groups (0..{n - 1}): there is no group "
                              f"{group}")
    return [(g, group_dir(path, g, n)) for g in ([group] if group is not None else range(n))]


def group_heading(g, d) -> None:
    if g is not None:
        click.echo(f"== group {g}: {d}")
