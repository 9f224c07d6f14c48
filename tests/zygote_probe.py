"""Run by a zygote-forked node in tests/test_zygote.py: prints its garbage collector's
state (``enabled <bool> frozen <int>``)."""

import gc

print(f"enabled {gc.isenabled()} frozen {gc.get_freeze_count()}", flush=True)
