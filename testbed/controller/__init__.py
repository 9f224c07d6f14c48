"""Controller service: owns running experiments and the run store, over HTTP.

``testbed.controller.app.create_app`` builds the FastAPI app; ``testbed.controller.server``
binds it (127.0.0.1 by default; a token is required on any other address). The
dashboard (``ui/``) talks to it and to nothing else.
"""
