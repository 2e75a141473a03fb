"""Scientific data as tables: sequences (FASTA/FASTQ), EEG recordings (EDF) and molecules
(SMILES), each read by the field's own library into rows the other operators work on.

* ``read_sequences`` (Biopython ``SeqIO``): one row per record: id, length, GC content,
  and for FASTQ the mean Phred quality.
* ``read_eeg`` (pyEDFlib; chosen over MNE in docs/DECISIONS.md): one row per channel: its
  sample rate, duration and absolute power per frequency band (Welch's method, Hann windows
  of two seconds, half overlapping).
* ``read_molecules`` (RDKit): one row per SMILES line (``SMILES [name]``): valid or not,
  molecular weight, formula and heavy atoms.

Each starts a plan, like ``select``. A relative ``path`` is the asking user's: the host
makes it absolute before the plan runs (:meth:`~.operators.Operator.located`) and lets the
sandboxed job read that one file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

import numpy as np
import pyarrow as pa
from pydantic import Field

from .operators import Operator, PlanError, RunContext, register

FORMATS = {
    "fasta": "a FASTA file holds records that each start with a '>' line naming the "
    "sequence, its letters on the lines below",
    "fastq": "a FASTQ file holds records of four lines: '@' and a name, the letters, '+', "
    "and one quality character per letter",
}
"""What each sequence format holds, said when a file is not one."""
FilePath = Annotated[str, Field(min_length=1, max_length=4096)]
BANDS: dict[str, tuple[float, float]] = {
    "delta": (1.0, 4.0),
    "theta": (4.0, 8.0),
    "alpha": (8.0, 13.0),
    "beta": (13.0, 30.0),
    "gamma": (30.0, 45.0),
}
"""The conventional EEG bands, in Hz (a band above the recording's Nyquist rate is null)."""


def _table(rows: dict[str, list], types: list[pa.DataType]) -> pa.Table:
    """The columns in ``rows`` (in order) as a table of ``types``."""
    arrays = [pa.array(v, t) for v, t in zip(rows.values(), types, strict=True)]
    return pa.table(arrays, names=list(rows))


class ReadFile(Operator):
    """An operator that starts a plan from one file."""

    needs_input: ClassVar[bool] = False
    path: FilePath

    def files(self) -> list[Path]:
        return [Path(self.path)]

    def located(self, base: Path) -> ReadFile:
        return self.model_copy(update={"path": str((base / self.path).resolve())})

    def _source(self) -> Path:
        path = Path(self.path)
        if not path.is_file():
            raise PlanError(f"{self.NAME}.path: {self.path} is not a readable file")
        return path


@register
class ReadSequences(ReadFile):
    """Sequences of a FASTA or FASTQ file, one row each (format from the suffix if unset)."""

    NAME: ClassVar[str] = "read_sequences"
    ADDS: ClassVar[tuple[str, ...]] = ("id", "length", "gc_content", "mean_quality")
    op: Literal["read_sequences"] = "read_sequences"
    format: Literal["fasta", "fastq"] | None = None

    def apply(self, table: pa.Table | None, ctx: RunContext) -> pa.Table:
        from Bio import SeqIO
        from Bio.SeqUtils import gc_fraction

        path = self._source()
        fmt = self.format or ("fastq" if path.suffix.lower() in (".fastq", ".fq") else "fasta")
        rows: dict[str, list] = {name: [] for name in self.ADDS}
        try:
            for record in SeqIO.parse(path, fmt):
                quality = record.letter_annotations.get("phred_quality")
                rows["id"].append(record.id)
                rows["length"].append(len(record.seq))
                rows["gc_content"].append(round(float(gc_fraction(record.seq)), 6))
                rows["mean_quality"].append(float(np.mean(quality)) if quality else None)
        except ValueError:
            raise PlanError(
                f"{self.NAME}: {self.path} could not be read as {fmt.upper()}: "
                f"{FORMATS[fmt]} (set format to the file's own, fasta or fastq)"
            ) from None
        return _table(rows, [pa.string(), pa.int64(), pa.float64(), pa.float64()])


def band_power(signal: np.ndarray, rate: float) -> dict[str, float | None]:
    """Absolute power (signal units² ) per band of :data:`BANDS`: Welch's estimate, Hann
    windows of two seconds (the whole signal if shorter), half overlapping."""
    width = int(min(len(signal), max(8, 2 * rate)))
    step = max(1, width // 2)
    window = np.hanning(width)
    scale = rate * float((window**2).sum())
    starts = range(0, len(signal) - width + 1, step)
    segments = np.stack([signal[s : s + width] - signal[s : s + width].mean() for s in starts])
    density = (np.abs(np.fft.rfft(segments * window, axis=1)) ** 2).mean(axis=0) / scale
    density[1:-1] *= 2  # one-sided
    freqs = np.fft.rfftfreq(width, 1.0 / rate)
    out: dict[str, float | None] = {}
    for name, (low, high) in BANDS.items():
        chosen = (freqs >= low) & (freqs < high)
        out[name] = (
            None
            if high > rate / 2 or not chosen.any()
            else float(density[chosen].sum() * (freqs[1] - freqs[0]))
        )
    return out


@register
class ReadEeg(ReadFile):
    """Channels of an EDF recording, one row each, with their power per band."""

    NAME: ClassVar[str] = "read_eeg"
    ADDS: ClassVar[tuple[str, ...]] = ("channel", "sample_rate", "seconds", *BANDS)
    op: Literal["read_eeg"] = "read_eeg"

    def apply(self, table: pa.Table | None, ctx: RunContext) -> pa.Table:
        import pyedflib

        path = self._source()
        try:
            reader = pyedflib.EdfReader(str(path))
        except OSError as exc:
            raise PlanError(f"{self.NAME}: {self.path} is not an EDF recording: {exc}") from None
        rows: dict[str, list] = {name: [] for name in self.ADDS}
        try:
            for i, label in enumerate(reader.getSignalLabels()):
                rate = float(reader.getSampleFrequency(i))
                signal = reader.readSignal(i)
                rows["channel"].append(label)
                rows["sample_rate"].append(rate)
                rows["seconds"].append(len(signal) / rate)
                for band, power in band_power(signal, rate).items():
                    rows[band].append(power)
        finally:
            reader.close()
        return _table(rows, [pa.string(), pa.float64(), pa.float64()] + [pa.float64()] * len(BANDS))


@register
class ReadMolecules(ReadFile):
    """Molecules of a SMILES file (``SMILES [name]`` a line), one row each."""

    NAME: ClassVar[str] = "read_molecules"
    ADDS: ClassVar[tuple[str, ...]] = (
        "name",
        "smiles",
        "valid",
        "molecular_weight",
        "formula",
        "heavy_atoms",
    )
    op: Literal["read_molecules"] = "read_molecules"

    def apply(self, table: pa.Table | None, ctx: RunContext) -> pa.Table:
        from rdkit import Chem, RDLogger
        from rdkit.Chem import Descriptors, rdMolDescriptors

        RDLogger.DisableLog("rdApp.*")  # an invalid SMILES is a row with valid=false
        rows: dict[str, list] = {name: [] for name in self.ADDS}
        lines = self._source().read_text(encoding="utf-8", errors="replace").splitlines()
        for number, line in enumerate(lines, 1):
            parts = line.split(maxsplit=1)
            if not parts or parts[0].startswith("#"):
                continue
            mol = Chem.MolFromSmiles(parts[0])
            rows["name"].append(parts[1].strip() if len(parts) > 1 else f"line {number}")
            rows["smiles"].append(parts[0])
            rows["valid"].append(mol is not None)
            rows["molecular_weight"].append(
                None if mol is None else round(float(Descriptors.MolWt(mol)), 4)
            )
            rows["formula"].append(None if mol is None else rdMolDescriptors.CalcMolFormula(mol))
            rows["heavy_atoms"].append(None if mol is None else mol.GetNumHeavyAtoms())
        return _table(
            rows, [pa.string(), pa.string(), pa.bool_(), pa.float64(), pa.string(), pa.int64()]
        )
