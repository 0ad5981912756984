"""Logging filters referenced by settings.LOGGING."""

from __future__ import annotations

import logging


class OneLineWarning(logging.Filter):
    """Turn a record into a one-line warning: no traceback. For `django.security`, which logs a
    bad Host header or too many form fields (anyone can send those) as an error with a full
    traceback; the message alone says everything."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.WARNING:
            record.levelno = logging.WARNING
            record.levelname = logging.getLevelName(logging.WARNING)
        record.exc_info = None
        record.exc_text = None
        record.stack_info = None
        return True
