"""Prefix store: warm turns equal cold runs (memory, disk, new process, quantized KV, after
cancels), bad files are rejected once and deleted, disk stays under its cap."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import pytest
from mlx_lm.models.cache import trim_prompt_cache

from agent.cancel import CancelToken
from agent.engine import drafters, prefix_disk
from agent.engine.drafters import Combined, DraftModel, PromptLookup
from agent.engine.prefix_store import PrefixStore
from agent.engine.cache import make_cache
from agent.engine.session import Session
from agent.engine.speculative import SpecPolicy, Speculator
from agent.engine.step import prefill
from agent.events import GenerationStats, PrefillProgress, TextDelta

REPO = Path(__file__).parents[1]
SYSTEM = ("You are spec-agent, a coding agent. Tools: read_file(path), edit_file(path, old, new), "
          "run(command). Call one tool at a time and wait for its result.")
FILES = ["agent/engine/step.py", "agent/cancel.py", "agent/engine/sampling.py",
         "agent/engine/errors.py", "agent/engine/pairing.py"]


def tool_result(i: int) -> dict:
    path = FILES[i % len(FILES)]
    text = (REPO / path).read_text()[:700]
    return {"role": "user", "content": f'<tool_result name="read_file" status="ok">\n{text}\n</tool_result>'}


def start(task: str = "Add type hints to the engine's step module.") -> list[dict]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]


def spec(draft) -> Speculator:
    """Draft model and lookup both drafting; K fixed so that every round speculates."""
    drafter = Combined(DraftModel(draft), PromptLookup(max_n=3, min_n=1), confident_n=2)
    return Speculator(drafter, SpecPolicy(mode="on", fixed_k=4))


def run(session: Session, prompt, n: int = 16, cancel=None, on_event=None):
    toks, stats = [], None
    for e in session.generate(prompt, max_tokens=n, stop_tokens=set(), cancel=cancel):
        if on_event is not None:
            on_event(e)
        if isinstance(e, TextDelta):
            toks += e.tokens
        elif isinstance(e, GenerationStats):
            stats = e
    return toks, stats


def cold(target, prompt, kv_bits: int = 0, n: int = 16) -> list[int]:
    return run(Session(target, kv_bits=kv_bits), prompt, n)[0]


def reply(target, toks) -> dict:
    return {"role": "assistant", "content": target.tokenizer.decode(toks)}


def new_store(root, warnings: list, background: bool = False, **kw) -> PrefixStore:
    return PrefixStore(root, kw.pop("memory_mb", 64), kw.pop("disk_mb", 64), warn=warnings.append,
                       background=background)


def assert_entries_match_cold(store: PrefixStore, models: dict) -> None:
    """Every stored entry (memory and disk) holds the KV a cold prefill of its tokens gives."""
    seen = 0
    for key, entries in store.memory.entries.items():
        for e in entries:
            _same_kv(models[key], e.tokens, e.cache)
            seen += 1
    if store.disk is not None:
        store.flush()
        for key in models:
            for path, _ in store.disk._files(key):
                tokens, cache, _ = store.disk.load(path, key)
                _same_kv(models[key], tokens, cache)
                seen += 1
    assert seen


def _same_kv(lm, tokens, cache) -> None:
    bits = getattr(cache[0], "bits", 0)
    assert all(c.offset == len(tokens) for c in cache)
    ref = make_cache(lm.model, bits)
    prefill(lm.model, list(tokens), ref, chunk=128)
    for a, b in zip(cache, ref):
        diff = mx.abs(_keys(a, len(tokens)) - _keys(b, len(tokens))).max().item()
        assert diff <= (0.05 if bits else 1e-4)


def _keys(c, n: int) -> mx.array:
    """The first n keys of a cache layer as floats (dequantized for a quantized cache)."""
    if hasattr(c, "bits"):
        w, scales, biases = (x[..., :n, :] for x in c.keys)
        return mx.dequantize(w, scales, biases, group_size=c.group_size, bits=c.bits)
    return c.keys[..., :n, :]


@pytest.mark.parametrize("kv_bits", [0, 8])
def test_warm_turns_equal_cold_across_a_new_process(pair, tmp_path, kv_bits):
    """Five turns with tool results and speculation: three in one process, then a fresh store
    and session on the same disk cache (a new process) for two more; each equals a cold run."""
    target, draft = pair
    warnings: list[str] = []
    store = new_store(tmp_path, warnings, background=True)
    s = Session(target, speculator=spec(draft), store=store, kv_bits=kv_bits)
    msgs, prev = start(), 0
    for turn in range(5):
        if turn == 3:  # a new process: nothing in memory, the disk cache as the last one left it
            store.flush()
            store = new_store(tmp_path, warnings)
            s = Session(target, speculator=spec(draft), store=store, kv_bits=kv_bits)
        prompt = s.render(msgs)
        got, stats = run(s, prompt)
        assert got == cold(target, prompt, kv_bits), f"turn {turn}"
        if turn:
            assert stats.cached_tokens >= prev, f"turn {turn} re-read {len(prompt) - stats.cached_tokens}"
        if turn == 3:
            assert store.stats["disk_hits"] == 2  # the target's and the draft's caches
            assert stats.rounds > 0 and stats.accepted > 0
        prev = len(prompt)
        msgs += [reply(target, got), tool_result(turn)]
    keys = {store.key_for(target, kv_bits): target, store.key_for(draft): draft}
    assert_entries_match_cold(store, keys)
    # /clear, same system prompt, new process: starts from the stored system prefix.
    fresh = Session(target, speculator=spec(draft), store=new_store(tmp_path, warnings), kv_bits=kv_bits)
    prompt = fresh.render(start("Now explain the cancel token."))
    got, stats = run(fresh, prompt)
    assert got == cold(target, prompt, kv_bits)
    assert stats.cached_tokens >= fresh._system_end(prompt) > 0
    assert not warnings


def test_cancels_leave_caches_consistent(pair, tmp_path, monkeypatch):
    """Cancel in prefill, cancel between rounds, an interrupt inside a round: the stored
    entries match cold prefills and the next turn equals a cold run."""
    target, draft = pair
    warnings: list[str] = []
    store = new_store(tmp_path, warnings)
    s = Session(target, prefill_chunk=32, speculator=spec(draft), store=store)
    keys = {store.key_for(target): target, store.key_for(draft): draft}
    msgs = start()
    got, _ = run(s, s.render(msgs))
    msgs += [reply(target, got), tool_result(0)]
    prompt = s.render(msgs)

    token = CancelToken()  # 1. cancelled after the first prefill chunk
    _, stats = run(s, prompt, cancel=token,
                   on_event=lambda e: isinstance(e, PrefillProgress) and token.cancel())
    assert stats.finish_reason == "cancelled"
    assert_entries_match_cold(store, keys)
    assert run(s, prompt)[0] == cold(target, prompt)

    token = CancelToken()  # 2. cancelled between speculative rounds
    _, stats = run(s, prompt, n=40, cancel=token,
                   on_event=lambda e: isinstance(e, TextDelta) and token.cancel())
    assert stats.finish_reason == "cancelled" and stats.generated_tokens < 40
    assert_entries_match_cold(store, keys)

    dm = s.speculator.drafter.model  # 3. interrupted inside a draft step: its cache is fed,
    real, calls = drafters.forward, []  # its token list not yet

    def forward(*a, **kw):
        out = real(*a, **kw)
        calls.append(1)
        if len(calls) == 6:
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(drafters, "forward", forward)
    monkeypatch.setattr(s.speculator.drafter, "confident_n", 99)  # always the draft model
    with pytest.raises(KeyboardInterrupt):
        run(s, prompt, n=40)
    monkeypatch.undo()
    assert len(dm.fed) == dm.cache.offset
    assert_entries_match_cold(store, keys)
    msgs += [reply(target, got), tool_result(1)]
    prompt = s.render(msgs)
    assert run(s, prompt)[0] == cold(target, prompt)
    assert not warnings


def test_interrupted_disk_write_leaves_no_file(llama, tmp_path, monkeypatch):
    warnings: list[str] = []
    s = Session(llama, store=new_store(tmp_path, warnings))
    prompt = s.render(start())

    def half_then_interrupt(path, data):
        path.write_bytes(bytes(data[: len(data) // 2]))
        raise KeyboardInterrupt

    monkeypatch.setattr(prefix_disk, "_write_file", half_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        run(s, prompt)
    monkeypatch.undo()
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # neither the file nor a temp
    fresh = Session(llama, store=new_store(tmp_path, warnings))
    got, stats = run(fresh, prompt)
    assert stats.cached_tokens == 0 and got == cold(llama, prompt)
    assert list(tmp_path.rglob("*.safetensors")) and not warnings


def _stored_file(llama, root: Path, tokens) -> tuple[PrefixStore, str, Path]:
    store = new_store(root, [])
    key = store.key_for(llama)
    cache = make_cache(llama.model)
    prefill(llama.model, tokens, cache)
    assert store.insert(key, tokens, cache)
    (path,) = root.rglob("*.safetensors")
    return store, key, path


def _damage(how: str, path: Path, store: PrefixStore, llama, tokens) -> None:
    data = path.read_bytes()
    if how == "flipped":
        path.write_bytes(data[:-100] + bytes(b ^ 0xFF for b in data[-100:]))
    elif how == "truncated":
        path.write_bytes(data[: len(data) * 2 // 3])
    elif how == "garbage":
        path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!" + data[24:])
    elif how == "other_model":  # the same file filed under another model's key
        other = path.parents[1] / store.key_for(llama, kv_bits=8) / path.name
        other.parent.mkdir()
        path.rename(other)
    elif how == "other_tokens":  # a file whose metadata lists other tokens than its name says
        forged = list(tokens)
        forged[5] = (forged[5] + 1) % 100
        n, tok_hash = len(tokens), prefix_disk.digest(tuple(forged))
        path.rename(path.with_name(path.name.replace(path.name.split("-")[2], tok_hash)))
        assert n == len(forged)


@pytest.mark.parametrize("how", ["flipped", "truncated", "garbage", "other_model", "other_tokens"])
def test_bad_file_is_rejected_once_and_deleted(llama, tmp_path, how):
    tokens = [(7 * i) % 200 + 3 for i in range(90)]
    store, key, path = _stored_file(llama, tmp_path, tokens)
    _damage(how, path, store, llama, tokens)
    if how == "other_model":
        key = store.key_for(llama, kv_bits=8)
    if how == "other_tokens":
        tokens[5] = (tokens[5] + 1) % 100
    warnings: list[str] = []
    fresh = new_store(tmp_path, warnings)
    assert fresh.fetch_nearest(key, tokens + [1, 2]) == (None, 0)
    assert len(warnings) == 1 and "deleted" in warnings[0]
    assert not list(tmp_path.rglob("*.safetensors"))
    assert fresh.fetch_nearest(key, tokens + [1, 2]) == (None, 0) and len(warnings) == 1


def test_fetch_nearest_returns_private_trimmed_copies(llama, tmp_path):
    store = new_store(None, [])  # memory only
    key = store.key_for(llama)
    tokens = [(5 * i) % 200 + 3 for i in range(60)]
    cache = make_cache(llama.model)
    prefill(llama.model, tokens, cache)
    assert not store.insert(key, tokens + [9], cache)  # more tokens than the cache holds
    assert store.insert(key, tokens, cache)
    assert store.fetch_nearest(key, tokens, longer_than=60) == (None, 0)
    got, n = store.fetch_nearest(key, tokens[:40] + [1, 2, 3])  # a longer entry, trimmed
    assert n == 40 and all(c.offset == 40 for c in got)
    trim_prompt_cache(got, 10)
    prefill(llama.model, [5, 5], got)  # the caller writes into buffers it shares with the entry
    prefill(llama.model, [4] * 20, got)  # ...and extends its copy
    again, n = store.fetch_nearest(key, tokens + [1])
    assert n == 60
    _same_kv(llama, tokens, again)  # the stored entry is unchanged
    assert store.key_for(llama) == key != store.key_for(llama, kv_bits=4)


def test_a_stored_entry_holds_its_own_positions_not_the_session_buffer(llama):
    """A session's cache grows in steps of 256 positions; an entry of 60 tokens keeps 60, so
    the session's buffer is freed once the session lets go of it (a served request after
    request grew the process by the whole buffer each time before)."""
    store = new_store(None, [])
    key = store.key_for(llama)
    tokens = [(7 * i) % 200 + 3 for i in range(60)]
    cache = make_cache(llama.model)
    prefill(llama.model, tokens, cache)
    assert cache[0].keys.shape[-2] > 4 * len(tokens)  # the buffer: many more positions
    assert store.insert(key, tokens, cache)
    (entry,) = store.memory.entries[key]
    assert all(c.keys.shape[-2] == c.values.shape[-2] == 60 for c in entry.cache)
    before = mx.get_active_memory()
    del cache
    import gc

    gc.collect()
    freed = before - mx.get_active_memory()
    assert freed >= 0.8 * sum(c.keys.nbytes + c.values.nbytes for c in entry.cache) * 4
    _same_kv(llama, tokens, entry.cache)


def test_disk_stays_under_its_cap(llama, tmp_path):
    warnings: list[str] = []
    store = new_store(tmp_path, warnings, disk_mb=0.3)  # ~1 KB per token: about three entries
    key = store.key_for(llama)
    system = [11 + i % 50 for i in range(20)]
    cache = make_cache(llama.model)
    prefill(llama.model, system, cache)
    assert store.insert(key, system, cache, kind="system")
    for i in range(6):
        tokens = system + [(i * 31 + j * 7) % 300 + 3 for j in range(80)]
        cache = make_cache(llama.model)
        prefill(llama.model, tokens, cache)
        assert store.insert(key, tokens, cache)
        assert store.disk.nbytes() <= 0.3 * 2**20
        names = [p.name for p in tmp_path.rglob("*.safetensors")]
        assert any(n.startswith(f"turn-{len(tokens)}-") for n in names)  # the newest stays
        assert any(n.startswith("system-") for n in names)  # evicted after every turn
    assert 1 < len(names) < 7 and not warnings


def test_runtime_wires_the_store(llama_dir, tmp_path, monkeypatch):
    from agent.config import Config
    from agent.runtime import Runtime

    monkeypatch.setenv("SPEC_AGENT_HOME", str(tmp_path / "home"))
    rt = Runtime(Config(model=str(llama_dir), kv_bits=8, sandbox="off"), tmp_path, warn=lambda m: None)
    rt.load()
    assert rt.session.store is rt.store
    assert rt.store.disk.root == tmp_path / "home" / "prefix-cache"
    assert rt.session.tcache.kv_bits == 8


def test_bench_cache_pipeline_on_a_tiny_model(llama_dir):
    """`bench cache` end to end at a small context: the new process finds the disk cache."""
    from agent.bench.cache import run_bench
    from agent.config import Config

    out = run_bench(Config(model=str(llama_dir), device="cpu"), context=2800, log=lambda m: None)
    assert 2400 <= out["context_tokens"] <= 2800
    assert out["identical_output"] and out["identical_output_new_process"]
    # the new user message (and a reply that re-tokenizes differently) is all that is re-read
    assert out["reprefilled_tokens"] < 100
    assert out["reprefilled_tokens_new_process"] <= out["reprefilled_tokens"]
    for key in ("prefill_tps_1k", "prefill_tps_4k", "ttft_cold_s", "ttft_warm_s",
                "ttft_new_process_s", "speedup"):
        assert out[key] > 0, key
