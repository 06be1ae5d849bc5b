"""Wire transfer: an irreversible tool pauses the saga; another process approves; a resume runs
the transfer exactly once. See README.md in this folder."""
