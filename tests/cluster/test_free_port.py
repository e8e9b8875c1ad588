"""`rcpforge.cluster.gang.free_port`: a port handed out (a gang's MASTER_PORT, a test's server)
is held until its server binds it, and that server, binding as torch's rendezvous store
does, gets it. Real sockets on this machine; no timing."""

from __future__ import annotations

import errno
import socket
from datetime import timedelta

import pytest

from rcpforge.cluster.gang import free_port


def _plain_bind(port: int) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_a_port_handed_out_is_not_handed_out_again_before_its_server_binds_it():
    port = free_port()
    # a second call asked for that very port (as a launcher starting the next gang, or
    # another test session scanning a range, would come upon it) passes it over
    with pytest.raises(OSError, match="no free TCP port"):
        free_port(ports=[port])
    assert free_port(ports=[port, 0]) != port
    with pytest.raises(OSError) as taken:  # so does anyone's plain bind
        _plain_bind(port)
    assert taken.value.errno == errno.EADDRINUSE


def test_the_server_it_was_picked_for_binds_it():
    """As a rendezvous store, a web server or a database does: with SO_REUSEADDR."""
    port = free_port()
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen()
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            accepted, _ = server.accept()
            accepted.close()


def test_torch_distributed_rendezvous_store_binds_a_master_port_from_it():
    """The product's use: MASTER_PORT of a gang whose rank 0 starts torch's TCPStore."""
    import torch.distributed as dist
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, 1, True, timeout=timedelta(seconds=30), wait_for_workers=False)
    store.set("rank0", "here")
    assert store.get("rank0") == b"here"


def test_a_port_someone_listens_on_is_passed_over():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        assert free_port(ports=[taken, 0]) != taken
        with pytest.raises(OSError, match="no free TCP port"):
            free_port(ports=[taken])
