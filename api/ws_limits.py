"""Limits shared by the API's WebSockets (``/v1/stream``, ``/v1/agent``): the size of a message
read before its socket's key was checked.

A socket may carry its key in a message (browsers cannot set headers on a WebSocket), so that
message is read before anyone knows who sent it: :func:`check_preauth_size` refuses it unparsed
past ``websocket_preauth_max_bytes`` with :class:`PreAuthTooLargeError`, answered with close
code :data:`MESSAGE_TOO_BIG`. The API's WebSocket protocol cuts such a message while it arrives
(:mod:`voicelane.api.ws_protocol`); this is the same bound for other servers.
"""

from __future__ import annotations

from voicelane.common.errors import TextTooLargeError

MESSAGE_TOO_BIG = 1009
"""The WebSocket close code of a message over the size allowed (RFC 6455)."""


class PreAuthTooLargeError(TextTooLargeError):
    """A message of a socket without an ``Authorization`` header is over
    ``websocket_preauth_max_bytes``."""


def check_preauth_size(message: str, max_bytes: int) -> None:
    """Refuse, unparsed, a message read before its socket's key was checked that is over
    ``max_bytes`` (UTF-8)."""
    if len(message) > max_bytes or len(message.encode("utf-8", "surrogatepass")) > max_bytes:
        raise PreAuthTooLargeError(
            f"a message without an Authorization header may be at most {max_bytes} bytes "
            "(its key is checked after it is read): send the key in the header",
            field="api_key",
        )
