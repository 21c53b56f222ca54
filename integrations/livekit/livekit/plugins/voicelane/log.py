"""The plugin's logger."""

import logging

logger = logging.getLogger("livekit.plugins.voicelane")
