"""The incast benchmark on loopback: exact byte counts, round structure, silent servers."""
from __future__ import annotations

import socket
import sys
import threading
import time
from pathlib import Path

from incastlab.apps.local import LocalJob, events, free_port, read_jsonl

INCAST = [sys.executable, "-m", "incastlab.apps.incast"]


def test_incast_counts_bytes_exactly(tmp_path: Path) -> None:
    senders, block, rounds = 4, 123_457, 15  # an odd block size: no lucky buffer multiples
    # four distinct ports: each socket is held until all are bound (free_port() four
    # times could hand out one port twice, as each is free again once it returns)
    held = [socket.create_server(("127.0.0.1", 0)) for _ in range(senders)]
    ports = [s.getsockname()[1] for s in held]
    for s in held:
        s.close()
    with LocalJob(tmp_path) as job:
        for i, port in enumerate(ports, start=1):
            job.start(i, INCAST + ["--role", "server", "--listen", f"127.0.0.1:{port}",
                                   "--rank", str(i), "--out", str(tmp_path),
                                   "--timeout", "30"])
        job.start(0, INCAST + ["--role", "client", "--rank", "0", "--out", str(tmp_path),
                               "--servers", ",".join(f"127.0.0.1:{p}" for p in ports),
                               "--block-size", str(block), "--rounds", str(rounds),
                               "--rto-min-ms", "1", "--timeout", "30"])
        codes = job.wait(60)
        assert all(c == 0 for c in codes.values()), [job.stderr(r) for r in codes]
    client = read_jsonl(tmp_path / "0.jsonl")
    start = events(client, "start")[0]
    assert start["role"] == "client" and start["mode"] == "incast"
    assert start["rto_min_ms"] == 1 and start["senders"] == senders
    rounds_ = events(client, "round")
    assert [r["round"] for r in rounds_] == list(range(rounds))
    for r in rounds_:
        assert r["bytes"] == senders * block and r["block_bytes"] == block
        assert r["senders"] == senders and r["t_end"] >= r["t_start"]
        assert abs(r["goodput_mbps"] - 8 * r["bytes"] / (r["t_end"] - r["t_start"]) / 1e6) \
            < 1e-6 * r["goodput_mbps"]
    for prev, nxt in zip(rounds_, rounds_[1:], strict=False):
        assert nxt["t_start"] >= prev["t_end"]  # a round starts after the last one ended
    assert events(client, "final")[0]["bytes_recv"] == rounds * senders * block
    for i in range(1, senders + 1):
        server = read_jsonl(tmp_path / f"{i}.jsonl")
        assert events(server, "start")[0]["role"] == "incast-server"
        assert [s["bytes"] for s in events(server, "served")] == [block] * rounds
        final = events(server, "final")[0]
        assert final["requests"] == rounds and final["bytes_sent"] == rounds * block


def test_silent_server_fails_the_client_within_timeout(tmp_path: Path) -> None:
    """A server that accepts but never answers: the client errors out, naming it."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted: list[socket.socket] = []
    thread = threading.Thread(target=lambda: accepted.append(listener.accept()[0]),
                              daemon=True)
    thread.start()
    try:
        with LocalJob(tmp_path) as job:
            t0 = time.monotonic()
            proc = job.start(0, INCAST + ["--role", "client", "--rank", "0", "--out",
                                          str(tmp_path), "--servers", f"127.0.0.1:{port}",
                                          "--rounds", "3", "--timeout", "2"])
            proc.wait(30)
            elapsed = time.monotonic() - t0
            assert proc.returncode == 1
            line = job.stderr(0).strip()
            assert line == ("incastlab.apps.incast: error: rank 0: round not complete "
                            f"within 2 s; blocks missing from 127.0.0.1:{port}"), line
            assert elapsed < 15
        assert events(read_jsonl(tmp_path / "0.jsonl"), "error")
    finally:
        for s in accepted:
            s.close()
        listener.close()


def test_unreachable_server_is_a_clear_error(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    with LocalJob(tmp_path) as job:
        proc = job.start(0, INCAST + ["--role", "client", "--rank", "0", "--out", str(tmp_path),
                                      "--servers", f"127.0.0.1:{port}", "--timeout", "1"])
        proc.wait(30)
        assert proc.returncode == 1
        assert f"cannot connect to server 127.0.0.1:{port} within 1 s" in job.stderr(0)
