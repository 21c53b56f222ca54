"""Settings: one tree per process kind, read from the environment once, when the process starts.

A process kind's root (:mod:`~voicelane.core.settings.processes`) holds its sections
(:mod:`~voicelane.core.settings.sections`, :class:`~voicelane.core.storage.StorageSettings`)::

    RedisSettings                       voicelane redis
    └─ ServiceSettings                  (every service: Redis, limits, storage, real-time lane)
       ├─ .realtime   RealtimeSettings
       ├─ .storage    StorageSettings   (.local, .s3)
       ├─ WorkerSettings + EngineSettings          voicelane worker
       │    .device, .batcher BatcherSettings, .chattts ChatTTSSettings, .piper PiperSettings
       ├─ FrontSettings                 (.api_keys, .llm LlmSettings)
       │  ├─ ApiSettings                voicelane api
       │  ├─ GrpcSettings               voicelane grpc
       │  └─ WyomingSettings            voicelane wyoming
       ├─ FlowerSettings                voicelane flower
       └─ StackSettings = Worker + Api + Grpc + Wyoming + Flower   voicelane up
    EmbeddedSettings + EngineSettings   voicelane render / say / voices
    CliSettings                         every command: VOICELANE_API_KEY, _SERVER, _DEBUG

A variable's name is its path: ``VOICELANE_`` + the fields joined by ``__``
(``VOICELANE_BATCHER__MAX_BATCH``, ``VOICELANE_LLM__MODEL``). How the environment is read,
Ollama's own variables and the refusal of old names: :mod:`~voicelane.core.settings.environment`.
Every variable is documented in ``docs/configuration.md`` (a test keeps the two in step).
"""

from voicelane.core.engines import CPU_ENGINES
from voicelane.core.settings.environment import Root, variable_name
from voicelane.core.settings.processes import (
    ROOTS,
    ApiSettings,
    CliSettings,
    EmbeddedSettings,
    EngineSettings,
    FlowerSettings,
    FrontSettings,
    GrpcSettings,
    RedisSettings,
    ServiceSettings,
    StackSettings,
    WorkerSettings,
    WyomingSettings,
)
from voicelane.core.settings.sections import (
    BatcherSettings,
    ChatTTSSettings,
    LlmSettings,
    PiperSettings,
    RealtimeSettings,
)

__all__ = [
    "CPU_ENGINES",
    "ROOTS",
    "ApiSettings",
    "BatcherSettings",
    "ChatTTSSettings",
    "CliSettings",
    "EmbeddedSettings",
    "EngineSettings",
    "FlowerSettings",
    "FrontSettings",
    "GrpcSettings",
    "LlmSettings",
    "PiperSettings",
    "RealtimeSettings",
    "RedisSettings",
    "Root",
    "ServiceSettings",
    "StackSettings",
    "WorkerSettings",
    "WyomingSettings",
    "variable_name",
]
