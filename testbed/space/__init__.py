"""Space tier: LEO constellations, ground stations and the time-varying links they make.

``config`` (pydantic only) is cheap to import; ``orbits``, ``visibility`` and
``schedule`` import numpy and sgp4 and are imported when a run needs them.
"""
