"""Random byte mutations of a valid small GGUF file and a valid prefix-cache file, fixed seeds.

A mutated GGUF file must load or fail with the clean error (an error with exit code 2 and a
one-line message: what the command line prints as one line); a mutated prefix-cache file must
load or be rejected with one one-line warning, never raise. Each run is a subprocess with a
time and address-space limit, so a hang, a crash or a runaway allocation fails the test too.
The worker is this file run as a script: `python test_bounded_fuzz.py gguf|prefix FOLDER`.
"""

from __future__ import annotations

import json
import os
import random
import resource
import struct
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = 200
GIB = 1 << 30
_BIG = (0, 1, 0xFF, 1 << 31, 1 << 32, 1 << 62, (1 << 63) + 5, (1 << 64) - 1)


_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def gguf_layout(data: bytes) -> tuple[list[tuple[int, str]], list[tuple[int, int]]]:
    """(fields, values) of a valid GGUF header: `fields` are (offset, kind) of every count,
    length and type field, kind "Q" (a u64 count or length) or "I" (a u32 type or dimension
    count); `values` are the (start, end) byte spans of each key's value type and value."""
    fields, values, pos = [(8, "Q"), (16, "Q")], [], 24

    def string() -> None:
        nonlocal pos
        fields.append((pos, "Q"))
        pos += 8 + struct.unpack_from("<Q", data, pos)[0]

    def value(vtype: int) -> None:
        nonlocal pos
        if vtype == 8:
            string()
        elif vtype == 9:
            etype, count = struct.unpack_from("<IQ", data, pos)
            fields.extend([(pos, "I"), (pos + 4, "Q")])
            pos += 12
            for _ in range(count):
                value(etype)
        else:
            pos += _SCALAR[vtype]

    n_tensors, n_kv = struct.unpack_from("<QQ", data, 8)
    for _ in range(n_kv):
        string()
        fields.append((pos, "I"))
        start, pos = pos, pos + 4
        value(struct.unpack_from("<I", data, pos - 4)[0])
        values.append((start, pos))
    for _ in range(n_tensors):
        string()
        n_dims = struct.unpack_from("<I", data, pos)[0]
        fields.extend([(pos, "I"), *((pos + 4 + 8 * d, "Q") for d in range(n_dims)),
                       (pos + 4 + 8 * n_dims, "I"), (pos + 8 + 8 * n_dims, "Q")])
        pos += 16 + 8 * n_dims
    return fields, values


# Well-formed values of other types: what a reader that trusts the key's type breaks on.
_VALUES = (struct.pack("<IQ", 8, 3) + b"abc", struct.pack("<IQ", 8, 0), struct.pack("<II", 4, 0),
           struct.pack("<IQ", 10, (1 << 64) - 1), struct.pack("<If", 6, float("nan")),
           struct.pack("<IIQII", 9, 4, 2, 1, 2),  # an array where a number goes
           struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 1500 + struct.pack("<IQ", 4, 0),
           struct.pack("<IIQ", 9, 8, 2) + struct.pack("<Q", 1) + b"x" + struct.pack("<Q", 1) + b"\xff")


def _field_value(kind: str, old: int, rng: random.Random) -> bytes:
    if kind == "I":  # a value type (9: array, 8: string), a GGML type or a dimension count
        return struct.pack("<I", rng.choice((9, 8, 13, 99, 0xFFFFFFFF, old + 1, 0)))
    return struct.pack("<Q", rng.choice(_BIG + (old + 1, old - 1 & (1 << 64) - 1, old * 1000)))


def mutate(data: bytes, rng: random.Random, lo: int, hi: int,
           layout: tuple[list, list] = ((), ())) -> bytes:
    """1-4 edits of `data` at offsets in [lo, hi): with a GGUF `layout`, a third of the time
    one key's value replaced by a well-formed value of another type (done first, so the
    layout still holds), half of the rest a hostile value in a count, length or type field;
    else bit flips, special bytes, big u64s, deleted and inserted runs; one case in ten
    also truncated."""
    fields, values = layout
    b = bytearray(data)
    if values and rng.random() < 1 / 3:
        start, end = rng.choice(values)
        b[start:end] = rng.choice(_VALUES)
        return bytes(b)
    for _ in range(rng.randint(1, 4)):
        i, op = rng.randrange(lo, min(hi, len(b))), rng.randrange(5)
        if fields and rng.random() < 0.5:
            at, kind = rng.choice(fields)
            width = 4 if kind == "I" else 8
            old = struct.unpack_from("<" + kind, data, at)[0]
            b[at : at + width] = _field_value(kind, old, rng)[: len(b[at : at + width])]
        elif op == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[i] = rng.choice((0x00, 0xFF, 0x7F, 0x80, 0x08, 0x09, 0x5B))
        elif op == 2:
            value = rng.choice(_BIG + (rng.getrandbits(64),))
            b[i : i + 8] = struct.pack("<Q", value)[: len(b[i : i + 8])]
        elif op == 3:
            del b[i : i + rng.randint(1, 16)]
        else:
            b[i:i] = rng.randbytes(rng.randint(1, 16))
    if rng.random() < 0.1:
        b = b[: rng.randrange(lo, len(b))]
    return bytes(b)


_JSON_EDITS = (b"[" * 5000, b"{\"a\":" * 3000, b"\xff\xfe", b"1e999", b"-1", b"9" * 5000,
               b'"', b"null", b"[]", b"{}")


def mutate_safetensors(data: bytes, rng: random.Random) -> bytes:
    """`data` with its JSON header edited (nesting, bad UTF-8, odd numbers and values) and
    its size prefix fixed, so the edit reaches the JSON parser and what reads its fields."""
    size = struct.unpack_from("<Q", data)[0]
    header = bytearray(data[8 : 8 + size])
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(header))
        header[i : i + rng.choice((0, 0, 1, 4))] = rng.choice(_JSON_EDITS)
    return struct.pack("<Q", len(header)) + bytes(header) + data[8 + size :]


def _clean(e: BaseException) -> bool:
    return getattr(e, "exit_code", None) == 2 and "\n" not in str(e) and bool(str(e))


def _fuzz_gguf(folder: Path) -> dict:
    import gguf
    import gguf_synth

    from agent.engine.gguf import load_gguf

    valid = gguf_synth.write(folder / "valid.gguf", "llama").path
    data = valid.read_bytes()
    header_end = gguf.GGUFReader(valid).data_offset  # mutations in tensor data are not parsing
    assert load_gguf(valid, dequantize=True).reader in ("mlx", "gguf")
    layout = gguf_layout(data)
    rng, out = random.Random(55), {"loaded": 0, "clean": 0, "bad": []}
    path = folder / "case.gguf"
    for n in range(CASES):
        path.write_bytes(mutate(data, rng, 0, header_end, layout))
        try:  # odd cases through the gguf package's reader and the conversion
            load_gguf(path, dequantize=True, reader="gguf" if n % 2 else "auto")
            out["loaded"] += 1
        except Exception as e:  # noqa: BLE001 - what is caught is what the test reports
            if _clean(e):
                out["clean"] += 1
            else:
                out["bad"].append(f"case {n}: {type(e).__name__}: {str(e)[:200]}")
    return out


def _fuzz_prefix(folder: Path) -> dict:
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    from agent.engine.prefix_disk import DiskTier, digest

    tokens = tuple(range(7, 19))
    cache = [KVCache() for _ in range(2)]
    for c in cache:
        c.update_and_fetch(mx.ones((1, 2, len(tokens), 4)), mx.zeros((1, 2, len(tokens), 4)))
    data = bytes(DiskTier.serialize("k", tokens, cache, "turn"))
    rng, out = random.Random(55), {"loaded": 0, "clean": 0, "bad": []}
    for n in range(CASES):
        root = folder / f"c{n}"
        (root / "k").mkdir(parents=True)
        bad = mutate(data, rng, 0, len(data)) if n % 2 else mutate_safetensors(data, rng)
        size = struct.unpack_from("<Q", bad)[0] if len(bad) >= 8 else 0
        body = bad[8 + size :] if 8 + size <= len(bad) else bad  # a name that matches the data
        path = root / "k" / f"turn-{len(tokens)}-{digest(tokens)}-{digest(body)}.safetensors"
        path.write_bytes(bad)
        warnings: list[str] = []
        try:
            disk = DiskTier(root, GIB, warnings.append)
            disk.candidates("k", tokens, 0)
            got = disk.load(path, "k") if path.exists() else None
        except Exception as e:  # noqa: BLE001
            out["bad"].append(f"case {n}: raised {type(e).__name__}: {str(e)[:200]}")
            continue
        if got is not None:
            out["loaded"] += 1
        elif len(warnings) == 1 and "\n" not in warnings[0] and not path.exists():
            out["clean"] += 1
        else:
            out["bad"].append(f"case {n}: rejected with {len(warnings)} warnings, file kept: "
                              f"{path.exists()}: {warnings[:2]}")
    return out


def _run(kind: str, tmp_path: Path) -> dict:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 * GIB, 2 * GIB))

    r = subprocess.run([sys.executable, __file__, kind, str(tmp_path)], capture_output=True,
                       timeout=300, cwd=ROOT, preexec_fn=limit, check=False,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join((str(ROOT), str(ROOT / "tests")))})
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    return json.loads(r.stdout.decode().splitlines()[-1])


def test_mutated_gguf_files_load_or_fail_with_the_clean_error(tmp_path):
    out = _run("gguf", tmp_path)
    assert out["bad"] == []
    assert out["clean"] >= CASES // 2 and out["loaded"] + out["clean"] == CASES  # mostly damage


def test_mutated_prefix_cache_files_load_or_are_rejected_with_one_warning(tmp_path):
    out = _run("prefix", tmp_path)
    assert out["bad"] == []
    assert out["clean"] >= CASES // 2 and out["loaded"] + out["clean"] == CASES


if __name__ == "__main__":
    import logging

    logging.disable(logging.CRITICAL)  # a conversion's info lines are not the result
    kind, where = sys.argv[1], Path(sys.argv[2])
    print(json.dumps((_fuzz_gguf if kind == "gguf" else _fuzz_prefix)(where)), flush=True)
    from agent.engine import release_streams

    release_streams()  # this thread's MLX streams, before the interpreter exits
