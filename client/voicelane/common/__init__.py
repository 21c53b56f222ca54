"""What the SDK and the server share: the wire contract (``wire``, generated from proto/), the
error hierarchy (``errors``), the audio codecs and file writers (``audio``) and atomic output
files (``atomic``). Shipped in the SDK's distribution (``voicelane-client``); the server's
``voicelane.core`` builds on it and nothing here imports the server."""
