from __future__ import annotations

from .app import main

main()
