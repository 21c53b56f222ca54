"""Limits shared by the API's WebSockets: the size of a message read before its key was checked.

The WebSocket stream (:mod:`voicelane.api.routes.speech`) has its own copy of this check (a
private function of its module); the agent protocol (:mod:`voicelane.api.routes.agent`) uses
this one. Same bound, same error: :class:`~voicelane.api.routes.speech.PreAuthTooLargeError`,
close 1009.
"""

from __future__ import annotations

from voicelane.api.routes.speech import PreAuthTooLargeError


def check_preauth_size(message: str, max_bytes: int) -> None:
    """Refuse, unparsed, a message read before its socket's key was checked that is over
    ``max_bytes`` (UTF-8). The API's WebSocket protocol cuts such a message while it arrives
    (:mod:`voicelane.api.ws_protocol`); this is the same bound for other servers."""
    if len(message) > max_bytes or len(message.encode("utf-8", "surrogatepass")) > max_bytes:
        raise PreAuthTooLargeError(
            f"a message without an Authorization header may be at most {max_bytes} bytes "
            "(its key is checked after it is read): send the key in the header",
            field="api_key",
        )
