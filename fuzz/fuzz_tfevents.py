"""Coverage-guided fuzzing of the event-file reader (atheris / libFuzzer).

Each input is one event file. It goes through record scanning (whole-file and
in small blocks, which must agree), event decoding, legacy migration and run
assembly, as ``tbconvert.read`` reads a logdir. Any exception other than a
:class:`tbconvert.errors.TbconvertError` is a finding.

    python fuzz/fuzz_tfevents.py -max_total_time=600 [libFuzzer options] [corpus dirs]

The seed corpus is built at start from the event files under ``fixtures/`` and
the inputs in ``fuzz/regressions/tfevents/`` (into a temporary directory, unless corpus
directories are given).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import atheris

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

with atheris.instrument_imports(include=["tbconvert"]):
    import tbconvert
    from tbconvert.errors import TbconvertError
    from tbconvert.formats.tfevents import records

import blockscan  # noqa: E402 - after the instrumented import of tbconvert

BLOCK = 256          # small blocks, so block edges fall inside inputs
_WORK = Path(tempfile.mkdtemp(prefix="tbconvert-fuzz-"))
_LOGDIR = _WORK / "logs"
_FILE = _LOGDIR / "run" / "events.out.tfevents.1.fuzz"


def _longest_claim(data: bytes) -> int:
    """Bytes claimed by the longest record header (length and its CRC right) in ``data``."""
    longest = 0
    for off in range(len(data) - records.HEADER + 1):
        need = int.from_bytes(data[off:off + 8], "little") + records.HEADER + records.FOOTER
        if need > longest and records.masked_crc32c(data[off:off + 8]) == \
                int.from_bytes(data[off + 8:off + 12], "little"):
            longest = need
    return longest


def check_one(data: bytes) -> None:
    starts, lengths, damage = records.scan(data)
    covered = int(lengths.sum()) + 16 * len(starts) + sum(d.length for d in damage)
    if covered != len(data):
        raise AssertionError(f"scan accounts for {covered} of {len(data)} bytes")
    _FILE.write_bytes(data)
    blocked = blockscan.in_blocks(_FILE, block_size=BLOCK).payloads
    # Blocks may differ from a whole-file scan only for records longer than their lookahead,
    # and for a header that claims more than two blocks over a damaged payload (skipped whole
    # when read in blocks: a documented limit).
    if len(data) and int(lengths.max(initial=0)) + 16 <= BLOCK and \
            all(d.length <= BLOCK for d in damage) and _longest_claim(data) <= 2 * BLOCK:
        whole = blockscan.payloads(data, starts, lengths)
        if blocked != whole:
            raise AssertionError(f"blocks found {len(blocked)} records, a whole-file scan "
                                 f"{len(whole)}")
    try:
        tbconvert.read(_LOGDIR)
    except TbconvertError:
        pass


def TestOneInput(data: bytes) -> None:
    check_one(data)


def seed_corpus(into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    seeds = sorted((ROOT / "fixtures").rglob("*tfevents*"))
    seeds += sorted((ROOT / "fuzz" / "regressions" / "tfevents").glob("*.bin"))
    for i, path in enumerate(seeds):
        shutil.copyfile(path, into / f"seed-{i:03d}")
    return into


def main(argv: list[str]) -> None:
    _FILE.parent.mkdir(parents=True, exist_ok=True)
    args = list(argv)
    if not any(not a.startswith("-") for a in args[1:]):
        args.append(str(seed_corpus(_WORK / "corpus")))
    if not any(a.startswith("-max_len=") for a in args):
        args.append("-max_len=16384")
    atheris.Setup(args, TestOneInput)
    try:
        atheris.Fuzz()
    finally:
        shutil.rmtree(_WORK, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv)
