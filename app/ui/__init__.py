"""The web page at ``GET /``: example nets, the drawn-net cache and the Netron viewer files."""
