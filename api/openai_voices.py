"""OpenAI's voice names, mapped to voicelane voices.

OpenAI's clients (the ``openai`` SDK, Pipecat, LiveKit's OpenAI plugin) send one of OpenAI's
voice names (:data:`OPENAI_VOICE_NAMES`); Pipecat refuses any other name client-side. So each
name speaks as a real voice of this deployment, chosen by the setting ``openai_voices``
(``VOICELANE_OPENAI_VOICES``: name → voicelane voice id, docs/configuration.md) and, for a name
it leaves out, by a default computed from the engines served (:func:`default_voices`):

* ``alloy`` (the SDK's and Pipecat's default) is ``auto``: the text's language picks the voice,
  as before names were mapped;
* the other twelve take, in the order of :data:`OPENAI_VOICE_NAMES`, the English voices of the
  served engines in their order of preference (``piper,espeak``: Piper's voices, then espeak's;
  a seed-voice engine such as ChatTTS: ``seed:0``, ``seed:1``...), each qualified by its engine
  (``espeak:en-gb``), cycling when there are fewer voices than names — so a client limited to
  OpenAI's names can still choose among the voices.

A name of the setting may also be an alias of the operator's own (``narrator``). Any other voice
(``piper:en_US-joe-medium``, ``seed:42``, a tenant's voice) is used as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from voicelane.core.rules import DEFAULT_VOICE, EngineCapabilities

OPENAI_VOICE_NAMES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer",
    "verse", "marin", "cedar",
)  # fmt: skip
"""OpenAI's built-in voice names (the ``openai`` SDK 3.57's list), in the order defaults go."""
AUTO_NAME = "alloy"
"""The name that keeps meaning ``auto``."""
ESPEAK_ENGLISH = (
    "en-us", "en-gb", "en-us-nyc", "en-gb-x-rp", "en-gb-scotland", "en-029", "en-gb-x-gbclan",
    "en-gb-x-gbcwmd",
)  # fmt: skip
"""espeak's English voices in the order names take them (``en-shaw`` reads Shavian: left out)."""
SEED_VOICES = 12
"""A seed-voice engine offers ``seed:0`` … ``seed:11`` to the names (any seed is a voice)."""


def english_voices(caps: EngineCapabilities) -> list[str]:
    """The engine's English voices that OpenAI's names may take, best first (``auto`` and
    ``custom`` excluded), unqualified."""
    if caps.seed_voices:
        return [f"seed:{n}" for n in range(SEED_VOICES)]
    if caps.engine == "espeak":
        return [voice for voice in ESPEAK_ENGLISH if voice in caps.voice_ids]
    return [
        info.id
        for info in caps.voices
        if info.id != DEFAULT_VOICE
        and any(code.lower().replace("_", "-").split("-")[0] == "en" for code in info.languages)
    ]


def default_voices(engines: Sequence[EngineCapabilities]) -> dict[str, str]:
    """Each OpenAI name's default voice over ``engines`` (served, in order of preference): see
    the module docstring. Engines are taken in order until there is a voice per name."""
    wanted = len(OPENAI_VOICE_NAMES) - 1
    candidates: list[str] = []
    for caps in engines:
        if len(candidates) >= wanted:
            break
        candidates.extend(f"{caps.engine}:{voice}" for voice in english_voices(caps))
    mapping = {AUTO_NAME: DEFAULT_VOICE}
    others = [name for name in OPENAI_VOICE_NAMES if name != AUTO_NAME]
    for index, name in enumerate(others):
        mapping[name] = candidates[index % len(candidates)] if candidates else DEFAULT_VOICE
    return mapping


def voice_map(
    configured: Mapping[str, str], engines: Sequence[EngineCapabilities]
) -> dict[str, str]:
    """Every mapped name → its voice: the defaults over ``engines``, then the setting's
    entries (names lower case) on top."""
    mapping = default_voices(engines)
    mapping.update({name.lower(): voice for name, voice in configured.items()})
    return mapping


def mapped_voice(requested: str | None, mapping: Mapping[str, str]) -> str:
    """The voicelane voice a request's ``voice`` speaks as: a mapped name's voice (OpenAI's
    names in any case), an unmapped OpenAI name ``auto``, anything else as it is; none:
    ``auto``."""
    if not requested:
        return DEFAULT_VOICE
    name = requested.lower()
    if name in mapping:
        return mapping[name]
    if name in OPENAI_VOICE_NAMES:
        return DEFAULT_VOICE
    return requested


def is_mapped_name(requested: str | None, configured: Mapping[str, str]) -> bool:
    """Whether ``requested`` is a name the mapping decides (OpenAI's, or the setting's)."""
    name = (requested or "").lower()
    return name in OPENAI_VOICE_NAMES or name in configured
