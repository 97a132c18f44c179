"""Golden scenario scripts: tests/raft/scenarios/*.txt drive a ManualCluster step by step.

Each block is a command, a `----` line, and the expected output, then a blank line. After a
behaviour change, regenerate with `pytest tests/raft/test_raft_scenarios.py --rewrite` and
review the diff like code.

Commands:
  cluster n1 n2 n3 [spare=n4,n5] [seed=N] [<RaftConfig field>=<int>]   (replaces the cluster)
  elect N               N's vote time comes; deliver until quiet (re-votes included)
  tick +MS [N ...]      advance the clock by MS, tick the nodes (default all)
  settle +MS            tick everyone every 10 ms and deliver everything for MS
  deliver [K]           deliver K queued messages (default: until the queue is empty)
  queue                 list queued messages
  drop [SRC->DST [K]]  drop queued messages (optionally only the first K from SRC to DST)
  propose N [K]         N proposes K entries
  partition A B | C     cut the groups off from each other; `heal` undoes
  block SRC->DST        one-way cut
  crash N / restart N
  manual-persist N      N's flushes wait for `persist N`
  persist N
  transfer N TO / add N PEER / remove N PEER
  status                every node's state
  log N                 the terms of N's log, and its commit index
"""
from pathlib import Path

import pytest

from quorumlog.raft import RaftConfig
from quorumlog.testing.cluster import ManualCluster
from quorumlog.raft.errors import RaftError

DIR = Path(__file__).parent / "scenarios"
SCRIPTS = sorted(DIR.glob("*.txt"))


def parse(text):
    blocks, cmd, out, in_out = [], None, [], False
    comments = []
    for line in text.splitlines():
        if not in_out:
            if line.startswith("#") or (not line.strip() and cmd is None):
                comments.append(line)
                continue
            if line == "----":
                in_out = True
                continue
            cmd = line
        else:
            if line == "":
                blocks.append((comments, cmd, out))
                comments, cmd, out, in_out = [], None, [], False
            else:
                out.append(line)
    if cmd is not None:
        blocks.append((comments, cmd, out))
    return blocks


class Runner:
    def __init__(self):
        self.cl = None

    def run(self, cmd):
        args = cmd.split()
        op, args = args[0], args[1:]
        cl = self.cl
        extra = []
        try:
            if op == "cluster":
                ids = [a for a in args if "=" not in a]
                kv = dict(a.split("=", 1) for a in args if "=" in a)
                spare = kv.pop("spare", "")
                seed = int(kv.pop("seed", "0"))
                cfg = RaftConfig(**{k: int(v) for k, v in kv.items()})
                self.cl = ManualCluster(ids, config=cfg, seed=seed,
                                        spare=[s for s in spare.split(",") if s])
                return self.status()
            if op == "elect":
                cl.elect(args[0])
            elif op == "tick":
                cl.tick(cl.now + int(args[0].lstrip("+")), args[1:] or None)
            elif op == "settle":
                cl.settle(cl.now + int(args[0].lstrip("+")))
            elif op == "deliver":
                cl.deliver(int(args[0]) if args else None)
            elif op == "queue":
                extra = [m.describe() for m in cl.queue] or ["(empty)"]
            elif op == "drop":
                if args:
                    s, d = args[0].split("->")
                    cl.drop(lambda m: m.src == s and m.dst == d, int(args[1]) if len(args) > 1 else None)
                else:
                    cl.drop()
            elif op == "propose":
                cl.propose(args[0], int(args[1]) if len(args) > 1 else 1)
            elif op == "partition":
                groups, g = [], set()
                for a in args:
                    if a == "|":
                        groups.append(g)
                        g = set()
                    else:
                        g.add(a)
                groups.append(g)
                cl.partition(*groups)
            elif op == "block":
                s, d = args[0].split("->")
                cl.block(s, d)
            elif op == "heal":
                cl.heal()
            elif op == "crash":
                cl.crash(args[0])
            elif op == "restart":
                cl.restart(args[0])
            elif op == "manual-persist":
                cl.manual_persist(args[0])
            elif op == "persist":
                cl.persist(args[0])
            elif op in ("transfer", "add", "remove"):
                c = cl.core(args[0])
                {"transfer": c.transfer_leadership, "add": c.add_member,
                 "remove": c.remove_member}[op](args[1])
                cl.drain(args[0])
            elif op == "status":
                return cl.take_output() + self.status()
            elif op == "log":
                lg = cl.logs[args[0]]
                terms = " ".join(str(lg.term_at(i)) for i in range(1, lg.last_index() + 1))
                extra = [f"{args[0]} terms: {terms or '(empty)'} commit={cl.core(args[0]).commit_index}"]
            else:
                raise ValueError(f"unknown scenario command {op!r}")
        except RaftError as e:
            extra = [f"error: {type(e).__name__}: {e}"]
        return cl.take_output() + extra

    def status(self):
        cl = self.cl
        return [f"t={cl.now}ms"] + [("DOWN " + i) if i in cl.down else cl.core(i).status() for i in cl.ids]


def render(blocks):
    out = []
    for comments, cmd, lines in blocks:
        out.extend(comments)
        out.append(cmd)
        out.append("----")
        out.extend(lines)
        out.append("")
    return "\n".join(out)


def test_scenarios_exist():
    assert len(SCRIPTS) >= 6


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.stem)
def test_scenario(path, rewrite):
    blocks = parse(path.read_text())
    r = Runner()
    got = []
    mismatches = []
    for comments, cmd, expected in blocks:
        actual = r.run(cmd)
        got.append((comments, cmd, actual))
        if actual != expected:
            mismatches.append(f"command {cmd!r}:\n  expected:\n    " + "\n    ".join(expected)
                              + "\n  got:\n    " + "\n    ".join(actual))
    if rewrite:
        path.write_text(render(got))
        return
    assert not mismatches, f"{path.name} differs (run with --rewrite to regenerate):\n" + "\n".join(mismatches[:3])
