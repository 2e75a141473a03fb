"""Which library reads EDF recordings for DataElf's ``read_eeg``: pyEDFlib or MNE, side by side.

    python bench/eeg_reader_choice.py [--channels 32] [--minutes 10]

Writes one EDF+ recording (pyEDFlib's writer: sines and noise at 256 Hz), then in a fresh
interpreter per library and run: the import, the read of every channel into float64 arrays
(MNE: ``read_raw_edf(preload=True)``), and the peak resident memory. Both give the same
samples (checked); the band powers are computed the same way afterwards.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

READ = {
    "pyedflib": """
import pyedflib
reader = pyedflib.EdfReader(PATH)
data = [reader.readSignal(i) for i in range(reader.signals_in_file)]
reader.close()
""",
    "mne": """
import mne
mne.set_log_level("ERROR")
raw = mne.io.read_raw_edf(PATH, preload=True)
data = list(raw.get_data() * 1e6)  # volts -> the file's microvolts
""",
}
PROBE = """
import resource, time, json, sys
PATH = sys.argv[1]
t0 = time.perf_counter()
{importing}
t1 = time.perf_counter()
{reading}
t2 = time.perf_counter()
print(json.dumps({{"import_s": t1 - t0, "read_s": t2 - t1,
    "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "checksum": float(sum(abs(x).sum() for x in data))}}))
"""


def write_edf(path: Path, signals: dict[str, np.ndarray], rate: int) -> None:
    """An EDF+ file of ``signals`` (label -> microvolts within ±100) sampled at ``rate``."""
    import pyedflib

    writer = pyedflib.EdfWriter(str(path), len(signals), file_type=pyedflib.FILETYPE_EDFPLUS)
    header = {"dimension": "uV", "sample_frequency": rate, "physical_min": -100.0}
    header |= {"physical_max": 100.0, "digital_min": -32768, "digital_max": 32767}
    writer.setSignalHeaders([{"label": label, **header} for label in signals])
    writer.writeSamples(list(signals.values()))
    writer.close()


def write(path: Path, channels: int, minutes: float, rate: int = 256) -> None:
    """A recording of ``channels`` sines (5-40 Hz) with noise."""
    n = int(rate * 60 * minutes)
    t = np.arange(n) / rate
    noise = np.random.default_rng(0)
    signals = {
        f"C{i}": 40 * np.sin(2 * math.pi * (5 + i % 36) * t) + noise.normal(0, 5, n)
        for i in range(channels)
    }
    write_edf(path, signals, rate)


def probe(library: str, path: Path) -> dict[str, float]:
    """One fresh interpreter: import, read every channel, peak RSS."""
    first, rest = READ[library].strip().split("\n", 1)
    code = PROBE.format(importing=first, reading=rest)
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=32)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "recording.edf"
        write(path, args.channels, args.minutes)
        size = path.stat().st_size / 2**20
        print(f"{args.channels} channels x {args.minutes:g} min at 256 Hz: {size:.1f} MiB EDF+")
        results = {lib: [probe(lib, path) for _ in range(args.runs)] for lib in READ}
    sums = {lib: round(r[0]["checksum"], 0) for lib, r in results.items()}
    print(f"  same samples: {len(set(sums.values())) == 1} ({sums})")
    print(f"  {'library':<10}{'import s':>10}{'read s':>9}{'peak RSS MB':>13}  (median of runs)")
    for lib, runs in results.items():
        med = {k: float(np.median([r[k] for r in runs])) for k in ("import_s", "read_s", "rss_mb")}
        print(f"  {lib:<10}{med['import_s']:>10.2f}{med['read_s']:>9.2f}{med['rss_mb']:>13.0f}")


if __name__ == "__main__":
    main()
