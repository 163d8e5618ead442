"""Tags of several models merged into one timestamp order, each tag released once it is safe.

Each model's tagger gives its tags in order of `start`; a tag of one model may go out when no
other model can still give an earlier one: that model has given a later tag, or has finished.
A model that is silent for a while holds the others' tags back until it speaks or ends (tags
are small: only the streaming latency grows, never the audio held).
"""

from __future__ import annotations

from collections import deque

from arengine.types import Tag


class TagMerge:
    """`count` ordered tag streams in, one ordered stream out (ties go to the lower index).

    >>> merge = TagMerge(2)
    >>> merge.add(0, [Tag(1.0, 2.0, "speech", 0.9)])
    []
    >>> [tag.label for tag in merge.add(1, [Tag(1.5, 1.7, "C4", 0.8)])]
    ['speech']
    >>> merge.add(1, [], done=True)  # stream 0 may still give a tag before 1.5 s
    []
    >>> [tag.label for tag in merge.add(0, [], done=True)]
    ['C4']
    """

    def __init__(self, count: int) -> None:
        self._pending: list[deque[Tag]] = [deque() for _ in range(count)]
        self._floor = [float("-inf")] * count
        """No later tag of stream `i` starts before `_floor[i]`."""

    def add(self, index: int, tags: list[Tag], done: bool = False) -> list[Tag]:
        """Stream `index`'s next tags (`done`: its last); returns the tags now safe, in order."""
        self._pending[index].extend(tags)
        if tags:
            self._floor[index] = max(self._floor[index], tags[-1].start)
        if done:
            self._floor[index] = float("inf")
        released: list[Tag] = []
        while (head := self._safe_head()) is not None:
            released.append(self._pending[head].popleft())
        return released

    def _safe_head(self) -> int | None:
        heads = [(queue[0].start, i) for i, queue in enumerate(self._pending) if queue]
        if not heads:
            return None
        start, first = min(heads)
        for i, queue in enumerate(self._pending):
            if i != first and not queue and self._floor[i] < start:
                return None  # stream `i` may still give a tag that starts earlier
        return first
