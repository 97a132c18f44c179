"""Installing a follower from the leader's retained log (InstallSegment), both sides (docs/raft.md
"Installing a follower").

Mixed into RaftCore (core.py), whose attributes these methods share; pure, like the core."""
from __future__ import annotations

from ..errors import ReplicationError
from .errors import NotSupportedByLogError
from .messages import Code, InstallSegment, InstallSegmentResponse, Role
from .progress import Progress
from .state import APPEND, COMPARE, INSTALL, LogInstalled


class InstallRules:
    def _start_install(self, pr: Progress) -> None:
        """Stream our retained log to pr (the snapshot equivalent: the log is the state)."""
        try:
            if not hasattr(self.log, "install_image"):  # (a RaftLog without the capability)
                raise NotSupportedByLogError("no install_image()")
            image = self.log.install_image()
        except NotSupportedByLogError:
            return  # the follower stays behind; BehindRetention said so
        pr.reset_to(INSTALL, pr.next)
        pr.image = image
        pr.image_sent = pr.image_acked = 0
        self._send_install(pr)

    def _send_install(self, pr: Progress) -> None:
        """Fill pr's window with chunks of the image (at most max_batch_bytes each)."""
        c = self.cfg
        im = pr.image
        while pr.image_sent < im.total_bytes and len(pr.inflight) < c.max_inflight_batches:
            try:
                chunk, n = self.log.read_image(im, pr.image_sent, c.max_batch_bytes)
            except ReplicationError:
                # retention moved our head since the image was taken: start over
                pr.reset_to(COMPARE, pr.next)
                pr.probe_sent_ms = self.now_ms
                self._start_install(pr)
                return
            off = pr.image_sent
            pr.image_sent = off + n
            configs = self._install_configs(im) if off == 0 else ()
            self._msgs.append(InstallSegment(
                self.term, self.id, pr.peer, im, off, chunk, n, pr.image_sent >= im.total_bytes,
                configs, self.commit_index, pr.epoch))
            pr.inflight.append((pr.image_sent, self.now_ms))

    def _install_configs(self, im) -> tuple:
        """The configuration in effect before the image, then the CONFIG entries inside it."""
        before = [cf for cf in self.configs if cf[0] < im.first_index]
        return tuple(before[-1:]) + self._configs_in(im.first_index, im.last_index)

    def _on_install_response(self, m: InstallSegmentResponse) -> None:
        pr = self._response_progress(m)
        if pr is None or pr.state != INSTALL or m.epoch != pr.epoch:
            return
        code = m.code
        if code == Code.INCONSISTENT_LEADER:
            self._become_candidate(self.term)
            return
        pr.last_resp_ms = self.now_ms
        if code == Code.SUCCESS:
            if m.match_index >= pr.image.last_index:  # installed, durable: replicate as usual
                if m.match_index > pr.match:
                    pr.match = m.match_index
                pr.image = None
                pr.behind_retention = False
                pr.reset_to(APPEND, pr.match + 1)
                if not pr.is_learner and pr.match > self.commit_index:
                    self._maybe_commit()
                if self.learner == m.src:
                    self._check_learner()
                if self.transferee == m.src:
                    self._check_transfer()
                if self.role == Role.LEADER and pr.state == APPEND:
                    self._send_appends(pr)
                return
            pr.image_acked = max(pr.image_acked, m.next_offset)
            while pr.inflight and pr.inflight[0][0] <= pr.image_acked:
                pr.inflight.popleft()
            if pr.image_acked >= pr.image.total_bytes:
                # it holds the image's end already (it caught up meanwhile), maybe not flushed:
                # go back to probing there, replication takes it from that point
                pr.image = None
                self._send_probe(pr, m.image_last)
                return
        elif code == Code.GAP:
            pr.inflight.clear()
            pr.epoch += 1
            pr.image_sent = pr.image_acked = m.next_offset
        elif code == Code.UNSUPPORTED:  # the follower's log cannot install: it stays behind
            pr.reset_to(COMPARE, pr.next)
            pr.probe_sent_ms = self.now_ms
            pr.image = None
            return
        else:
            return  # TERM_NOT_READY etc.: the timeout re-sends
        self._send_install(pr)

    def _on_install(self, m: InstallSegment) -> None:
        code = self._check_sender(m)
        if code != Code.SUCCESS:
            self._reply_install(m, code, 0, 0)
            return
        self._leader_epoch = m.epoch
        im = m.image
        if self._holds(im.last_index, im.last_term) or im.last_index <= self.commit_index:
            # a late or repeated chunk of an install we no longer need: we hold the image's end
            # (log matching: and all before it), or it ends below what we committed
            if self._holds(im.last_index, im.last_term) and im.last_index > self.leader_match:
                self.leader_match = im.last_index
            self._reply_install(m, Code.SUCCESS, im.total_bytes, self._reportable())
            return
        st = self._install
        if m.offset == 0 and (st is None or st[0] != im or st[1] != 0):
            head = m.configs[0] if m.configs else (0, self.voters, self._learners)
            try:
                self.log.begin_install(im, (head[1], head[2]))
            except NotSupportedByLogError:
                self._reply_install(m, Code.UNSUPPORTED, 0, 0)
                return
            st = self._install = [im, 0, m.configs]
        if st is None or st[0] != im or m.offset != st[1]:
            self._reply_install(m, Code.GAP, st[1] if st is not None and st[0] == im else 0, 0)
            return
        try:
            st[1] = self.log.write_chunk(m.offset, m.chunk)
        except ReplicationError:
            self._reply_install(m, Code.GAP, st[1], 0)
            return
        if not m.done:
            self._reply_install(m, Code.SUCCESS, st[1], 0)
            return
        self._finish_install(st, m)

    def _finish_install(self, st: list, m: InstallSegment) -> None:
        im, nxt, configs = st
        self._install = None
        last = self.log.finish_install()  # atomic and durable
        self._log_gen += 1  # (a flush report from before is about the old log)
        self.persisted_index = last
        self.leader_match = last
        self.reported_match = last
        if configs:
            self.configs = list(configs)
            self._apply_config()
        # everything before the image is committed (retention drops committed entries only)
        # and is in the leader store's state that came with it
        if self.commit_index < im.first_index - 1:
            self.commit_index = im.first_index - 1
            self._commit_changed = True
        if self.dispatched_index < im.first_index - 1:
            self.dispatched_index = im.first_index - 1
        self._events.append(LogInstalled(im.first_index, last, im.meta))
        self._follower_commit(m.commit_index)
        self._reply_install(m, Code.SUCCESS, nxt, last)

    def _holds(self, index: int, term: int) -> bool:
        lg = self.log
        if index < lg.first_index() or index > lg.last_index():
            return False
        return lg.term_at(index) == term

    def _reply_install(self, m: InstallSegment, code: Code, next_offset: int, match: int) -> None:
        self._msgs.append(InstallSegmentResponse(self.term, self.id, m.src, code, next_offset,
                                                 match, m.image.last_index, m.epoch))
