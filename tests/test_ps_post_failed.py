"""apps/ps.py: a post to a worker whose connection already closed (gloo refuses the
isend/irecv at once with a RuntimeError, e.g. the worker was just killed) is the same
lost worker as a wait that failed: a PeerError event for that worker, so the mode
decides (sync fails with "worker rank N lost", backup goes on). Seen on a loaded
machine: the raw RuntimeError ended the server and the run's reason lost the PS's line."""
from __future__ import annotations

import queue
import types

import pytest
import torch

from incastlab.apps import common
from incastlab.apps import ps_server as ps


def _server(mode: str = "sync") -> ps.Server:
    server = object.__new__(ps.Server)  # only what expect() and reply() touch
    server.args = types.SimpleNamespace(mode=mode, iterations=10, timeout=5.0)
    server.events = queue.Queue()
    server.n, server.workers = 4, [1, 2, 3]
    server.lost, server.stopped, server.senders = {}, set(), []
    server.version, server.params, server.bytes_sent = 3, torch.zeros(4), 0
    return server


def _refuse(*_args, **_kwargs):
    raise RuntimeError("[gloo/transport/tcp/pair.cc:553] Connection closed by peer "
                       "[10.0.1.2]:53403. This is typically caused by a remote worker crashing.")


@pytest.mark.parametrize("post, call, what", [
    ("irecv", lambda s: s.expect(2), "receive gradient from rank 2"),
    ("isend", lambda s: s.reply(2, None, 0, True), "send parameters to rank 2")])
def test_a_refused_post_is_a_lost_worker(monkeypatch, post, call, what):
    monkeypatch.setattr(ps.dist, post, _refuse)
    server = _server()
    call(server)  # no exception on the server's own thread
    w, buf, _t, exc = server.events.get_nowait()
    assert (w, buf) == (2, None) and isinstance(exc, common.PeerError)
    assert str(exc) == (f"{what}: peer lost (dead or unreachable): [gloo/transport/tcp/"
                        "pair.cc:553] Connection closed by peer [10.0.1.2]:53403. This is "
                        "typically caused by a remote worker crashing.")
    # sync: the server's loss is the lost worker with the mode's reason
    with pytest.raises(common.PeerError, match="^worker rank 2 lost; mode sync needs every"):
        server.lose(w, exc)
