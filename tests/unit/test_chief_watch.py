"""A parameter_server worker or ps task stops serving once the coordinator has left
(xpdist.task.runner.wait_for_chief_to_leave), however briefly the coordinator was up; real
sockets on 127.0.0.1 stand in for the coordinator's gRPC server."""

import socket
import threading
import time

import portpicker
import pytest

from xpdist.task.runner import wait_for_chief_to_leave


class Chief:
    """A listening socket that can drop its accepted connections and stop listening."""

    def __init__(self, port: int):
        self.port, self.conns, self.server = port, [], None
        self.accepted, self.close_at_once = 0, False

    def up(self):
        self.server = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.accepted += 1
            if self.close_at_once:
                conn.close()
            else:
                self.conns.append(conn)

    def drop_connections(self):
        while self.conns:
            self.conns.pop().close()

    def leave(self):
        self.server.shutdown(socket.SHUT_RDWR)  # wakes accept(); a bare close() leaves it listening
        self.server.close()
        self.server = None
        self.drop_connections()


def watch(port: int, grace_s: float = 0.5) -> threading.Thread:
    thread = threading.Thread(target=wait_for_chief_to_leave, args=(f"127.0.0.1:{port}",),
                              kwargs=dict(look_s=0.05, grace_s=grace_s), daemon=True)
    thread.start()
    return thread


@pytest.fixture
def chief():
    chief = Chief(portpicker.pick_unused_port())
    yield chief
    if chief.server is not None:
        chief.leave()


def test_a_chief_up_for_a_moment_is_seen_and_its_exit_ends_the_wait(chief):
    watcher = watch(chief.port)
    time.sleep(0.3)
    assert watcher.is_alive()  # never seen yet: it may still be importing TensorFlow
    chief.up()
    time.sleep(0.3)  # shorter than the 2 s between two looks that once missed it
    chief.leave()
    watcher.join(timeout=5)
    assert not watcher.is_alive()


def test_a_connection_dropped_by_a_chief_still_listening_is_no_exit(chief):
    chief.up()
    watcher = watch(chief.port)
    time.sleep(0.3)
    chief.drop_connections()  # as gRPC's handshake timeout does to a silent connection
    time.sleep(1.5)  # three times the grace
    assert watcher.is_alive()
    chief.leave()
    watcher.join(timeout=5)
    assert not watcher.is_alive()


def test_a_chief_that_closes_every_connection_at_once_is_neither_left_nor_polled_in_a_busy_loop(chief):
    chief.close_at_once = True
    chief.up()
    watcher = watch(chief.port)
    time.sleep(1.0)
    assert watcher.is_alive()  # it still listens: it has not left
    assert chief.accepted <= 1.0 / 0.05 + 5  # one connection per look at most
    chief.leave()
    watcher.join(timeout=5)
    assert not watcher.is_alive()
