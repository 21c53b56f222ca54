"""Benchmark: what batching buys the Piper engine on the CPU (en_US-joe-medium).

The same sentences (64 everyday English sentences, 3 to 30 words, in a fixed shuffled order)
are rendered by :class:`~voicelane.workers.engines.piper.PiperEngine` in ONNX runs of 1, 2, 4,
... 64 rows, two ways:

* **as they come**: the sentences in arrival order, cut into batches of B, each batch one run
  (what a run of B costs with the padding that random lengths bring);
* **bucketed**: all the sentences handed to the engine in one call, which sorts them by length
  and cuts runs of at most B rows (``PiperEngine.max_run_rows``): what the engine does when
  the batcher hands it a full batch.

Every configuration is measured ``--repeat`` times, interleaved (each round in a new random
order) so that other load on the machine hits them alike; the table gives each one's best
wall time and CPU time (``time.process_time``: every thread of this process) and the ratios
to one row per run, measured in the same process. On a shared machine the CPU time is the
steadier measure (with ``--threads 1`` it is the wall time the run would take on an idle
core). ``pad %`` is the share of the runs' phoneme ids that are padding.

Run: ``.venv/bin/python bench/piper_batch.py [--threads 1] [--repeat 2] [--device cuda:0]``
"""

from __future__ import annotations

import argparse
import random
import time
from dataclasses import dataclass

from bench.tables import header
from voicelane.core.settings import PiperSettings
from voicelane.workers.engines import Utterance
from voicelane.workers.engines.piper import PiperEngine

VOICE = "en_US-joe-medium"
SENTENCES = [
    "Good morning.",
    "Please hold the line.",
    "The museum is closed on public holidays.",
    "We have updated our privacy policy.",
    "Our new store opens next Monday.",
    "Thank you for calling; your call is important to us.",
    "Please turn off the lights when you leave the room.",
    "Add two cups of flour and stir until the batter is smooth.",
    "The train to Boston leaves at half past seven from platform four.",
    "She opened the window, looked at the harbor, and smiled.",
    "Every chapter ends with a short summary and a list of questions.",
    "He said nothing for a long time, then laughed and walked away.",
    "If you have any questions about your order, reply to this message.",
    "Rain is expected in the north, with temperatures around twelve degrees.",
    "The committee met on Tuesday to review the budget for the next fiscal year.",
    "Doctor Smith said the results, while promising, need to be confirmed by others.",
    "Your package was delivered this afternoon and left at the front door.",
    "The meeting has been moved to Thursday at three in the afternoon.",
    "Remember to bring a water bottle and comfortable shoes.",
    "The library will extend its opening hours during the exam period.",
    "A light breeze moved through the tall grass as the sun went down.",
    "Traffic on the main bridge is slow because of road works.",
    "Customers who ordered before noon will receive their items tomorrow.",
    "The children built a small boat out of paper and sticks.",
    "Please read the instructions carefully before you begin the test.",
    "It was the best of times, it was the worst of times.",
    "The old lighthouse has guided ships along this coast for two hundred years.",
    "Scientists have discovered a new species of frog in the rain forest.",
    "The concert was cancelled at the last minute because of the storm.",
    "Turn left at the next corner and continue straight for about a mile.",
    "Our team will contact you within two business days.",
    "The recipe calls for fresh basil, garlic, olive oil and a pinch of salt.",
    "He checked the weather forecast twice before leaving for the mountains.",
    "The software update improves battery life and fixes several bugs.",
    "Visitors are asked to keep their voices down in the reading room.",
    "On clear nights you can see thousands of stars from the top of the hill.",
    "The bakery on the corner sells the best bread in town.",
    "Please confirm your attendance by replying to this email before Friday.",
    "The river rose quickly after three days of heavy rain.",
    "Most birds leave the northern lakes before the first snow.",
    "The council approved a plan to plant a thousand trees along the avenue.",
    "Her grandmother told stories about the village where she grew up.",
    "Flights to the capital are delayed by about forty minutes.",
    "A good night's sleep is one of the best things you can do for your health.",
    "The students presented their projects to a panel of local engineers.",
    "Keep the receipt in case you need to return the product.",
    "The painting was sold at auction for much more than expected.",
    "When the bell rang, everyone hurried out of the classroom.",
    "The new bridge will cut the journey between the two towns by half.",
    "Water the plants every morning, but do not let the soil get too wet.",
    "The hotel offers free breakfast to guests who book directly.",
    "Nobody knew who had left the flowers on the doorstep.",
    "The orchestra rehearsed the final movement until late in the evening.",
    "You can change your password at any time from the settings page.",
    "The farmer hoped for rain, but the clouds passed without a drop.",
    "In the spring the valley is covered with wild flowers of every color.",
    "Please make sure all bags are stored under the seat in front of you.",
    "The detective looked at the muddy footprints and frowned.",
    "The city plans to open three new swimming pools before next summer.",
    "After a long day at work, he liked to cook a simple dinner and read.",
    "The first settlers arrived in the valley more than three centuries ago, bringing "
    "cattle, seeds and tools.",
    "If the alarm sounds, leave the building by the nearest exit and wait outside for "
    "further instructions.",
    "The report found that most households could save money by switching to a different "
    "energy supplier, especially during the winter months.",
    "Although the road was narrow and full of sharp bends, the driver kept a steady pace "
    "and reached the village just before dark.",
]
SIZES = (1, 2, 4, 8, 16, 32, 64)
BUCKETED = (4, 8, 16, 64)


@dataclass
class Config:
    rows: int
    bucketed: bool
    wall_s: float = float("inf")
    cpu_s: float = float("inf")
    audio_s: float = 0.0
    pad: float = 0.0

    @property
    def label(self) -> str:
        return f"{self.rows} ({'bucketed' if self.bucketed else 'as they come'})"


def padding(lengths: list[int], rows: int, bucketed: bool) -> float:
    """The share of the runs' phoneme ids that are padding."""
    ordered = sorted(lengths) if bucketed else lengths
    runs = [ordered[i : i + rows] for i in range(0, len(ordered), rows)]
    total = sum(max(run) * len(run) for run in runs)
    return 1 - sum(lengths) / total


def measure(engine: PiperEngine, utterances: list[Utterance], config: Config) -> None:
    engine.max_run_rows = config.rows
    wall = time.perf_counter()
    cpu = time.process_time()
    if config.bucketed:
        outputs = engine.synthesize(utterances)
    else:
        outputs = []
        for start in range(0, len(utterances), config.rows):
            outputs.extend(engine.synthesize(utterances[start : start + config.rows]))
    config.wall_s = min(config.wall_s, time.perf_counter() - wall)
    config.cpu_s = min(config.cpu_s, time.process_time() - cpu)
    config.audio_s = sum(len(pcm) for pcm in outputs) / engine.sample_rate_hz


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="ONNX Runtime threads")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--sentences", type=int, default=len(SENTENCES))
    parser.add_argument("--device", default="cpu", help="cpu or cuda:N (onnxruntime-gpu)")
    args = parser.parse_args()

    engine = PiperEngine(PiperSettings(threads=args.threads), device=args.device)
    engine.load()
    texts = SENTENCES[: args.sentences]
    random.Random(21).shuffle(texts)
    utterances = [Utterance(text, VOICE) for text in texts]
    engine.synthesize(utterances[:4])  # warm-up
    lengths = [sum(engine.row_lengths(u)) for u in utterances]
    sizes = [size for size in SIZES if size <= len(utterances)]
    configs = [Config(size, False) for size in sizes]
    configs += [Config(size, True) for size in BUCKETED if size < len(utterances)]
    for config in configs:
        config.pad = padding(lengths, config.rows, config.bucketed)
    order = random.Random(7)
    for _ in range(args.repeat):
        for config in order.sample(configs, len(configs)):  # a new order every round
            measure(engine, utterances, config)
            print(f"  {config.label}: {config.wall_s:.2f} s", flush=True)

    base = configs[0]
    print(
        f"\n{len(utterances)} sentences, {base.audio_s:.1f} s of audio, threads "
        f"{args.threads or 'default'}, best of {args.repeat}\n"
    )
    header(
        "rows per run",
        "pad %",
        "wall s",
        "x real time",
        "throughput vs 1",
        "CPU s",
        "audio s per CPU s",
        "CPU vs 1",
    )
    for config in configs:
        print(
            f"| {config.label} | {100 * config.pad:.0f} | {config.wall_s:.2f} "
            f"| {config.audio_s / config.wall_s:.1f} | {base.wall_s / config.wall_s:.2f} "
            f"| {config.cpu_s:.2f} | {config.audio_s / config.cpu_s:.1f} "
            f"| {config.cpu_s / base.cpu_s:.2f} |"
        )


if __name__ == "__main__":
    main()
