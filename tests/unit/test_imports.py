"""The default install and `import voicelane.workers` never import torch (DESIGN.md)."""

from __future__ import annotations

import subprocess
import sys

IMPORTS = """
import sys
import voicelane.core, voicelane.common.errors, voicelane.core.settings, voicelane.core.text
import voicelane.api, voicelane.api.cli
import voicelane.workers, voicelane.workers.batching, voicelane.workers.render
import voicelane.workers.engines, voicelane.workers.engines.base
import voicelane.workers.engines.chattts_config
from voicelane.workers.engines import ENGINE_NAMES, create_engine
from voicelane.core.settings import ChatTTSSettings
from voicelane.common.errors import ModelLoadError
engine = create_engine("espeak")
heavy = sorted(n for n in ("torch", "ChatTTS", "transformers", "numba") if n in sys.modules)
print(",".join(heavy) or "none")
"""


def test_default_import_path_never_imports_torch() -> None:
    result = subprocess.run(
        [sys.executable, "-c", IMPORTS], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "none"


def test_the_check_itself_sees_torch_when_it_is_imported() -> None:
    """The probe above is not vacuous: importing the engine module does load torch."""
    probe = (
        IMPORTS
        + "\nimport importlib.util\n"
        + (
            "if importlib.util.find_spec('torch'):\n"
            "    import voicelane.workers.engines.chattts\n"
            "    assert 'torch' in sys.modules\n"
        )
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr


def test_the_fronts_build_no_celery_app_and_import_no_worker_code() -> None:
    """Importing the REST app, the gRPC front and the stream gateway imports neither Celery
    (the batch-lane contract in core enqueues through a producer built on first use) nor
    the workers' modules."""
    probe = (
        "import sys\n"
        "import voicelane.api.rest, voicelane.api.grpc_front, voicelane.api.streams\n"
        "import voicelane.core.batch_lane\n"
        "loaded = sorted(n for n in sys.modules\n"
        "                if n == 'celery' or n.startswith('voicelane.workers'))\n"
        "print(','.join(loaded) or 'none')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "none"


def test_the_import_probe_sees_celery_once_a_worker_module_is_imported() -> None:
    probe = "import sys, voicelane.workers.celery_app\nassert 'celery' in sys.modules\n"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr


def test_the_settings_and_the_batcher_import_no_codec_or_service_library() -> None:
    """What the GPU benchmark loads (bench/gpu/run.sh carries only ChatTTS's own dependencies
    and pydantic): settings, the batching core and the ChatTTS engine's module import no audio
    codec (PyAV, opuslib) and no service client (Redis, boto3, Celery, FastAPI)."""
    probe = (
        "import sys\n"
        "import voicelane.core.settings, voicelane.workers.batching\n"
        "import voicelane.workers.engines.chattts_config\n"
        "heavy = ('av', 'opuslib', 'redis', 'boto3', 'celery', 'fastapi')\n"
        "print(','.join(sorted(n for n in heavy if n in sys.modules)) or 'none')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "none"
