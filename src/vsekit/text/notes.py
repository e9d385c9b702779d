"""What search says about the words of a query: those the model knows only weakly, and
those it rewrote."""

from __future__ import annotations

from vsekit.text.spelling import Change


def weak_note(weak: list[tuple[str, int]]) -> str | None:
    """One line for ``(word, count)`` pairs (count 0: known only by analogy), or None::

    note: the model knows drone only by analogy (general word vectors, never a
    photo's caption); it saw corgi in only 3 training captions: results may be weak
    """
    if not weak:
        return None
    analogy = [w for w, n in weak if n == 0]
    counts = [(w, n) for w, n in weak if n]
    rare = [f"{w} in {'only ' if i == 0 else ''}{n}{' training captions' if i == 0 else ''}"
            for i, (w, n) in enumerate(counts)]  # fmt: skip
    parts = []
    if analogy:
        parts.append(f"the model knows {', '.join(analogy)} only by analogy (general word "
                     "vectors, never a photo's caption)")  # fmt: skip
    if rare:
        parts.append(f"{'it' if analogy else 'the model'} saw {', '.join(rare)}")
    return f"note: {'; '.join(parts)}: results may be weak"


def correction_note(text: str, changes: list[Change] | tuple[Change, ...], hint: str = "") -> str:
    """One line saying what a search searched for and what it rewrote, or "" when it
    rewrote nothing::

    searching for "kid on skateboard" (corrected from "skatebord"; left out "lol")
    """
    if not changes:
        return ""
    fixed = [f'"{c.word}"' for c in changes if c.to]
    dropped = [f'"{c.word}"' for c in changes if not c.to]
    parts = ([f"corrected from {', '.join(fixed)}"] if fixed else []) + (
        [f"left out {', '.join(dropped)}"] if dropped else []
    )
    return f'searching for "{text}" ({"; ".join([*parts, *([hint] if hint else [])])})'
