"""Raptor."""

from raptor.ui.interrupt import at_startup

at_startup()  # the `raptor` program only: Ctrl-C while it loads is one line, exit 130
