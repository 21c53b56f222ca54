"""A hostile callback receiver: it accepts, then answers one byte at a time (a loopback
socket server in a thread). Each byte comes well within any per-read timeout, so only a
deadline on the whole callback cuts it."""

from __future__ import annotations

import contextlib
import socket
import threading

RESPONSE = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class Trickler:
    """Answers every connection with :data:`RESPONSE`, one byte every ``every_s``; with
    ``forever`` it keeps sending spaces of a header line instead and never ends."""

    def __init__(self, every_s: float, *, forever: bool = False) -> None:
        self.every_s = every_s
        self.forever = forever
        self.accepted = 0
        self.open = 0
        self.completed = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.1)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server.getsockname()[1])

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.accepted += 1
                self.open += 1
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(1.0)
            with contextlib.suppress(TimeoutError):
                conn.recv(65536)  # the request (headers and the small JSON body)
            payload = RESPONSE
            if self.forever:
                payload = b"HTTP/1.1 204 No Content\r\nX-Trickle: " + b"a" * 10_000_000
            for i in range(len(payload)):
                if self._stop.wait(self.every_s):
                    return
                conn.sendall(payload[i : i + 1])
            with self._lock:
                self.completed += 1
        except OSError:
            pass  # the client gave up: what a deadline does
        finally:
            conn.close()
            with self._lock:
                self.open -= 1

    def close(self) -> None:
        self._stop.set()
        self.server.close()
        self.thread.join(5)
