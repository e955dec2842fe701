"""The 77-token context rule of ConcretePlant (paper A.1): a keyword must lie inside the text the CLIP text encoder
sees. open_clip's tokenizer keeps ``context_length`` positions (start token, at most ``context_length - 2`` BPE
tokens, end token) and truncates the rest; :func:`context_end` finds the character offset where that happens, so a
hard negative's change is always visible to the text encoder. Candidate filtering by this rule lives in
:mod:`.keywords` (``apply_context_rule``).
"""

from __future__ import annotations

import functools
import re

__all__ = ["CLIP_CONTEXT_LENGTH", "ContextRule", "check_context_length", "context_end"]


#: open_clip's text context: 77 token positions, including the start-of-text and end-of-text tokens.
CLIP_CONTEXT_LENGTH = 77

#: Printable ASCII (without "&") plus space, tab, LF and CR. open_clip cleans text with ftfy.fix_text, two
#: html.unescape passes, whitespace collapsing and lower-casing; on such text only whitespace changes, and
#: whitespace only separates the tokenizer's word pieces, so pieces found on the raw lower-cased text carry
#: the raw character offsets. Any other text takes the exact (slower) path.
_PLAIN_TEXT = re.compile(r"[\x20-\x25\x27-\x7e\t\n\r]*")


@functools.lru_cache(maxsize=1)
def _clip_tokenizer():
    """open_clip's CLIP BPE tokenizer; its vocabulary ships inside the open_clip_torch wheel (no download)."""
    from open_clip.tokenizer import SimpleTokenizer

    return SimpleTokenizer()


def check_context_length(context_length: int | None) -> None:
    if context_length is None:
        return
    if isinstance(context_length, bool) or not isinstance(context_length, int) or context_length < 3:
        raise ValueError(
            f"context_length must be None (no context rule) or an int >= 3 (start + end + >= 1 text token), "
            f"got {context_length!r}"
        )


class ContextRule:
    """Character offset up to which a caption fits in ``context_length`` open_clip tokens (with a piece cache)."""

    def __init__(self, context_length: int) -> None:
        check_context_length(context_length)
        self.limit = context_length - 2  # start and end tokens take two positions
        self._piece_tokens: dict[str, int] = {}

    def end(self, text: str) -> int:
        plain = _PLAIN_TEXT.fullmatch(text) is not None
        # Cheap bound: on plain text every BPE token covers >= 1 non-space character.
        if plain and len(text) - text.count(" ") <= self.limit:
            return len(text)
        tok = _clip_tokenizer()
        return self._plain_end(tok, text) if plain else self._exact_end(tok, text)

    def _plain_end(self, tok, text: str) -> int:
        total = end = 0
        for m in tok.pat.finditer(text.lower()):
            piece = m.group()
            n = self._piece_tokens.get(piece)
            if n is None:
                encoded = "".join(tok.byte_encoder[b] for b in piece.encode("utf-8"))
                n = self._piece_tokens[piece] = len(tok.bpe(encoded).split(" "))
            if total + n > self.limit:
                return end
            total += n
            end = m.end()
        return len(text)

    def _exact_end(self, tok, text: str) -> int:
        full = tok.encode(text)
        if len(full) <= self.limit:
            return len(text)
        kept = full[: self.limit]
        ends = [m.end() for m in tok.pat.finditer(text)]
        lo, hi = 0, len(ends)  # lo = number of piece ends whose prefix encodes to <= limit tokens
        while lo < hi:
            mid = (lo + hi) // 2
            if len(tok.encode(text[: ends[mid]])) <= self.limit:
                lo = mid + 1
            else:
                hi = mid
        j = lo - 1
        while j >= 0:
            prefix = tok.encode(text[: ends[j]])
            if prefix == kept[: len(prefix)]:
                return ends[j]
            j -= 1
        return 0


def context_end(text: str, context_length: int = CLIP_CONTEXT_LENGTH) -> int:
    """Character offset up to which ``text`` is visible to open_clip's text encoder (paper A.1, 77-token rule).

    open_clip tokenizes a caption into ``context_length`` positions: start token, at most
    ``context_length - 2`` BPE tokens of the cleaned, lower-cased text, end token; longer texts are truncated.
    The result is the end of the last tokenizer word piece whose tokens all fit, so ``text[:result]`` is
    exactly the visible text (a word split across the cut counts as not visible); ``len(text)`` when all of
    the text fits. Uses ``open_clip.tokenizer.SimpleTokenizer`` (CLIP BPE, vocabulary bundled with
    open_clip_torch), loaded on first need; texts short enough to fit for sure never load it.

    Args:
        text: the anchor caption.
        context_length: L, the text encoder's context length in tokens incl. start/end (open_clip: 77), >= 3.

    Returns:
        an offset in ``[0, len(text)]`` (characters, not tokens).

    Raises:
        TypeError: if ``text`` is not a ``str``.
        ValueError: if ``context_length`` is not an int >= 3.
    """
    if not isinstance(text, str):
        raise TypeError(f"context_end: text must be a str, got {type(text).__name__}")
    return ContextRule(context_length).end(text)
