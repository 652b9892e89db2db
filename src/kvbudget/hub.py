"""Hugging Face Hub reachability, shared by every command that may read from the Hub.

huggingface_hub retries an unreachable host for about a minute; a short TCP check first turns an
offline machine into a one-line error in seconds. ``HF_HUB_OFFLINE`` is honoured as
huggingface_hub itself reads it (1/ON/YES/TRUE)."""

from __future__ import annotations

import os
import socket
from urllib.parse import urlparse


def hub_offline(flag_from_library: bool = False) -> bool:
    """True when HF_HUB_OFFLINE is set (read now, not only when huggingface_hub was imported)."""
    return flag_from_library or os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}


def hub_reachable(endpoint: str, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the Hub endpoint opens within ``timeout`` seconds."""
    parsed = urlparse(endpoint)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname or "", port), timeout=timeout):
            return True
    except OSError:
        return False
