"""Core: errors, config and settings, atomic files, hardware, i18n (no model code)."""
