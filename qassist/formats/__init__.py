"""Date and time formats of the admin and the pages (settings.FORMAT_MODULE_PATH)."""
