"""Debian's packaged glance-api in Debian roots, with the host's wheel."""
