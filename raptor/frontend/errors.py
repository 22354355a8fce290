"""The one exception the frontend raises for anything it cannot import."""

from __future__ import annotations

__all__ = ["FrontendError"]


class FrontendError(Exception):
    """A model the frontend cannot import; the message is one line meant for the user."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))
