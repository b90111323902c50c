"""What the commands ask of an installed PCP, with an answer without it: ``$PCP_TMP_DIR``
(:func:`tmp_dir`) and units as ``pmUnitsStr(3)`` prints them (:func:`units_text`).
python3-pcp is imported only when one of them is called."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Final

from pmda_mmv.mmvfile import pmunits

DEFAULT_TMP_DIR: Final = "/var/lib/pcp/tmp"


def tmp_dir() -> str:
    """``$PCP_TMP_DIR`` as PCP resolves it (``pmGetConfig``: the environment, then
    pcp.conf); without python3-pcp the environment, then PCP's default."""
    try:
        from pcp.pmapi import pmContext
    except Exception:  # ImportError, or OSError when libpcp cannot be loaded
        return os.environ.get("PCP_TMP_DIR", DEFAULT_TMP_DIR)
    return str(pmContext.pmGetConfig("PCP_TMP_DIR"))


DEFAULT_VAR_DIR: Final = "/var/lib/pcp"


def var_dir() -> str:
    """``$PCP_VAR_DIR`` as PCP resolves it (as :func:`tmp_dir`)."""
    try:
        from pcp.pmapi import pmContext
    except Exception:  # ImportError, or OSError when libpcp cannot be loaded
        return os.environ.get("PCP_VAR_DIR", DEFAULT_VAR_DIR)
    return str(pmContext.pmGetConfig("PCP_VAR_DIR"))


@functools.cache
def _pcp_units_str() -> Callable[[int], str] | None:
    """python3-pcp's pmUnitsStr over a native pmUnits word, or None without python3-pcp."""
    try:
        from pcp import pmapi
    except Exception:  # ImportError, or OSError when libpcp cannot be loaded
        return None

    def units_str(word: int) -> str:
        return str(pmapi.pmUnits.from_buffer_copy(pmunits.units_bytes(word)))

    return units_str


def units_text(word: int) -> str:
    """``pmUnitsStr`` of ``word``: PCP's own when python3-pcp is installed, else
    :func:`~.pmunits.format_units`; ``""`` for no units."""
    pcp = _pcp_units_str()
    return pcp(word) if pcp is not None else pmunits.format_units(word)
