"""The handshake state machine, without sockets: success for peers, clients and insecure
mode, and each failure: wrong secret, unknown node id, wrong cluster id (checked first),
reflected and replayed proofs, timeout, mode mismatch, bad configuration."""
import pytest

from quorumlog.errors import ConfigError, QuorumlogError
from quorumlog.net import auth as A
from quorumlog.net import messages as m
from quorumlog.net.auth import AuthConfig, Handshake
from quorumlog.net.errors import (AuthConfigError, AuthError, AuthRejectedError, BadProofError,
                                  HandshakeTimeoutError, UnknownNodeError, WrongClusterError)
from quorumlog.net.messages import AuthMode, RejectReason, Role

from net_support import CLIENT_SECRET, CLUSTER, SECRET


def cfg(node, peers=("a", "b", "c"), secret=SECRET, cluster=CLUSTER, **kw):
    return AuthConfig(cluster, node, secret, peers=[p for p in peers if p != node], **kw)


def run_handshake(init: Handshake, resp: Handshake):
    """Pump messages between the two sides until both are done (or one raises)."""
    to_resp = init.start()
    assert resp.start() == []
    for _ in range(4):
        to_init = [x for msg in to_resp for x in resp.receive(msg)]
        to_resp = [x for msg in to_init for x in init.receive(msg)]
        if init.done and resp.done:
            return
    raise AssertionError("handshake did not finish in 4 rounds")


def test_peers_authenticate_each_other():
    i, r = Handshake.initiator(cfg("a"), "b"), Handshake.responder(cfg("b"))
    run_handshake(i, r)
    assert (i.peer_id, r.peer_id, r.role) == ("b", "a", Role.PEER)


def test_client_authenticates_with_the_client_secret():
    client = AuthConfig(CLUSTER, "app-1", CLIENT_SECRET)
    i = Handshake.initiator(client, None, role=Role.CLIENT)
    r = Handshake.responder(cfg("b", client_secret=CLIENT_SECRET))
    run_handshake(i, r)
    assert (r.peer_id, r.role, i.peer_id) == ("app-1", Role.CLIENT, "b")


def test_client_holding_the_client_secret_cannot_pass_as_a_peer():
    # a client knows the client secret only; claiming the PEER role needs the cluster secret
    fake = AuthConfig(CLUSTER, "a", CLIENT_SECRET)
    i = Handshake.initiator(fake, "b")
    r = Handshake.responder(cfg("b", client_secret=CLIENT_SECRET))
    with pytest.raises(BadProofError):
        run_handshake(i, r)


def test_client_ids_can_be_restricted():
    r = Handshake.responder(cfg("b", client_secret=CLIENT_SECRET, client_ids=["app-1"]))
    i = Handshake.initiator(AuthConfig(CLUSTER, "app-2", CLIENT_SECRET), None, role=Role.CLIENT)
    with pytest.raises(UnknownNodeError, match="unknown client id 'app-2'"):
        run_handshake(i, r)
    assert r.reject.reason is RejectReason.UNKNOWN_NODE


def test_clients_refused_without_a_client_secret():
    r = Handshake.responder(cfg("b"))
    i = Handshake.initiator(AuthConfig(CLUSTER, "app-1", CLIENT_SECRET), None, role=Role.CLIENT)
    with pytest.raises(AuthError, match="takes no clients"):
        run_handshake(i, r)
    assert r.reject.reason is RejectReason.ROLE_REFUSED


def test_insecure_mode_still_checks_ids_and_cluster():
    i = Handshake.initiator(cfg("a", secret=None, insecure=True), "b")
    r = Handshake.responder(cfg("b", secret=None, insecure=True))
    run_handshake(i, r)
    assert r.peer_id == "a"
    r2 = Handshake.responder(cfg("b", secret=None, insecure=True, peers=("b", "c")))
    with pytest.raises(UnknownNodeError):
        run_handshake(Handshake.initiator(cfg("a", secret=None, insecure=True), "b"), r2)


@pytest.mark.parametrize("init_secret,resp_secret", [(None, SECRET), (SECRET, None)])
def test_secure_and_insecure_sides_refuse_each_other(init_secret, resp_secret):
    i = Handshake.initiator(cfg("a", secret=init_secret, insecure=True), "b")
    r = Handshake.responder(cfg("b", secret=resp_secret, insecure=True))
    with pytest.raises(AuthError, match="auth mode"):
        run_handshake(i, r)
    assert r.reject.reason is RejectReason.MODE_MISMATCH


def test_no_secret_refused_unless_insecure():
    with pytest.raises(AuthConfigError, match="insecure=True"):
        AuthConfig(CLUSTER, "a", None)
    assert issubclass(AuthConfigError, ConfigError)
    with pytest.raises(AuthConfigError, match="too short"):
        AuthConfig(CLUSTER, "a", b"short")
    with pytest.raises(AuthConfigError):
        AuthConfig(CLUSTER, "bad\nid", SECRET)
    with pytest.raises(AuthConfigError):
        AuthConfig("", "a", SECRET)


def test_wrong_secret_fails_at_the_responder():
    i = Handshake.initiator(cfg("a", secret=b"another-secret-of-enough-bytes!!"), "b")
    r = Handshake.responder(cfg("b"))
    with pytest.raises(BadProofError):
        run_handshake(i, r)
    assert r.failed and r.reject.reason is RejectReason.BAD_PROOF


def test_wrong_secret_at_the_responder_is_caught_by_the_initiator():
    """A node impersonating b without the secret cannot complete the initiator's side."""
    i = Handshake.initiator(cfg("a"), "b")
    hello = i.start()[0]
    ch = m.AuthChallenge(CLUSTER, "b", b"\x09" * 32)
    i.receive(ch)
    with pytest.raises(BadProofError):
        i.receive(m.AuthOk(b"\x00" * 32))
    assert hello.sender_id == "a" and i.failed


def test_unknown_node_id():
    r = Handshake.responder(cfg("b", peers=("b", "c")))
    with pytest.raises(UnknownNodeError, match="unknown peer node id 'a'"):
        run_handshake(Handshake.initiator(cfg("a"), "b"), r)
    assert r.reject.reason is RejectReason.UNKNOWN_NODE


def test_dialled_node_must_be_the_one_answering():
    r = Handshake.responder(cfg("c"))
    with pytest.raises(UnknownNodeError, match="dialled node 'b', this is 'c'"):
        run_handshake(Handshake.initiator(cfg("a"), "b"), r)
    # and the initiator checks the challenge too
    i = Handshake.initiator(cfg("a"), "b")
    i.start()
    with pytest.raises(UnknownNodeError, match="dialled 'b', 'c' answered"):
        i.receive(m.AuthChallenge(CLUSTER, "c", b"\x01" * 32))


def test_wrong_cluster_checked_before_anything_else():
    # wrong cluster AND unknown node AND wrong secret: the cluster id is what is reported
    r = Handshake.responder(cfg("b", peers=("b",)))
    i = Handshake.initiator(AuthConfig("other", "zz", b"x" * 32), "b")
    with pytest.raises(WrongClusterError):
        run_handshake(i, r)
    assert r.reject.reason is RejectReason.WRONG_CLUSTER
    assert r.peer_id is None                  # nothing of the peer was adopted


def test_wrong_cluster_in_the_challenge():
    i = Handshake.initiator(cfg("a"), "b")
    i.start()
    with pytest.raises(WrongClusterError):
        i.receive(m.AuthChallenge("other", "b", b"\x01" * 32))


def test_reflected_proof_with_swapped_ids_fails():
    """M, without the secret, dials a claiming to be b, and answers a's own dial to 'b' with
    the nonce a gave it; then reflects a's proof back. The ids' order differs: refused."""
    a_out = Handshake.initiator(cfg("a"), "b")
    hello = a_out.start()[0]
    a_in = Handshake.responder(cfg("a"))
    a_in.start()
    (challenge,) = a_in.receive(m.AuthHello(AuthMode.HMAC_SHA256, Role.PEER, CLUSTER, "b", "a",
                                            hello.nonce))
    (a_proof,) = a_out.receive(m.AuthChallenge(CLUSTER, "b", challenge.nonce))
    with pytest.raises(BadProofError):
        a_in.receive(a_proof)


def test_responder_proof_is_not_an_initiator_proof():
    """Same transcript, other direction: the direction label alone makes it fail."""
    tr = A.transcript(CLUSTER, Role.PEER, AuthMode.HMAC_SHA256, "b", "a", b"\x01" * 32,
                      b"\x02" * 32)
    responder_proof = A.proof(SECRET, A.DIR_RESPONDER, tr)
    r = Handshake.responder(cfg("a"), nonce=b"\x02" * 32)
    r.start()
    r.receive(m.AuthHello(AuthMode.HMAC_SHA256, Role.PEER, CLUSTER, "b", "a", b"\x01" * 32))
    with pytest.raises(BadProofError):
        r.receive(m.AuthProof(responder_proof))
    # while the genuine initiator proof for that transcript is accepted
    r2 = Handshake.responder(cfg("a"), nonce=b"\x02" * 32)
    r2.start()
    r2.receive(m.AuthHello(AuthMode.HMAC_SHA256, Role.PEER, CLUSTER, "b", "a", b"\x01" * 32))
    (ok,) = r2.receive(m.AuthProof(A.proof(SECRET, A.DIR_INITIATOR, tr)))
    assert r2.done and ok.proof == responder_proof


def test_replayed_proof_meets_a_fresh_nonce():
    i, r = Handshake.initiator(cfg("a"), "b"), Handshake.responder(cfg("b"))
    recorded = []
    to_resp = i.start()
    r.start()
    hello = to_resp[0]
    (ch,) = r.receive(hello)
    (pf,) = i.receive(ch)
    recorded.append(pf)
    r.receive(pf)
    # replay the whole recorded initiator side against a new responder session
    r2 = Handshake.responder(cfg("b"))
    r2.start()
    r2.receive(hello)
    with pytest.raises(BadProofError):
        r2.receive(recorded[0])


def test_timeout():
    r = Handshake.responder(cfg("b"), deadline=10.0)
    r.start()
    r.check_timeout(9.99)                     # not yet
    with pytest.raises(HandshakeTimeoutError):
        r.check_timeout(10.0)
    assert r.failed
    with pytest.raises(HandshakeTimeoutError):
        r.receive(m.AuthHello(AuthMode.HMAC_SHA256, Role.PEER, CLUSTER, "a", "b", b"\0" * 32))
    done = Handshake.initiator(cfg("a"), "b", deadline=1.0)
    run_handshake(done, Handshake.responder(cfg("b")))
    done.check_timeout(99.0)                  # finished handshakes do not time out


def test_messages_out_of_order_are_refused():
    r = Handshake.responder(cfg("b"))
    r.start()
    with pytest.raises(AuthError, match="unexpected AuthProof"):
        r.receive(m.AuthProof(b"\x00" * 32))
    i = Handshake.initiator(cfg("a"), "b")
    with pytest.raises(AuthError, match="before start"):
        i.receive(m.AuthChallenge(CLUSTER, "b", b"\x00" * 32))


def test_reject_from_the_peer():
    i = Handshake.initiator(cfg("a"), "b")
    i.start()
    with pytest.raises(AuthRejectedError, match="WRONG_CLUSTER"):
        i.receive(m.AuthReject(RejectReason.WRONG_CLUSTER, "wrong cluster id"))


def test_auth_errors_are_quorumlog_errors():
    for cls in (AuthError, WrongClusterError, UnknownNodeError, BadProofError,
                HandshakeTimeoutError, AuthRejectedError):
        assert issubclass(cls, QuorumlogError)


def test_peer_with_another_segment_size_is_refused_naming_both_values():
    from quorumlog.net.errors import GeometryMismatchError
    # the responder refuses a hello from a peer with other segments
    i = Handshake.initiator(cfg("a", segment_size_bytes=1 << 22), "b")
    r = Handshake.responder(cfg("b", segment_size_bytes=1 << 24))
    with pytest.raises(GeometryMismatchError,
                       match="peer 'a' has segment_size_bytes=4194304, this node \\('b'\\) "
                             "has segment_size_bytes=16777216"):
        run_handshake(i, r)
    assert r.reject.reason == RejectReason.GEOMETRY and "4194304" in r.reject.text \
        and "16777216" in r.reject.text
    # the initiator refuses a challenge from a responder with other segments
    i = Handshake.initiator(cfg("a", segment_size_bytes=1 << 22), "b")
    (hello,) = i.start()
    with pytest.raises(GeometryMismatchError, match="peer 'b' has segment_size_bytes=16777216"):
        i.receive(m.AuthChallenge(CLUSTER, "b", b"\x01" * 32, 1 << 24))
    # the same geometry, or a side that does not say (a client), authenticates
    run_handshake(Handshake.initiator(cfg("a", segment_size_bytes=1 << 22), "b"),
                  Handshake.responder(cfg("b", segment_size_bytes=1 << 22)))
    client = AuthConfig(CLUSTER, "app-1", CLIENT_SECRET)
    server = cfg("b", client_secret=CLIENT_SECRET, segment_size_bytes=1 << 22)
    run_handshake(Handshake.initiator(client, None, role=Role.CLIENT),
                  Handshake.responder(server))
