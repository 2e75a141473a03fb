"""The web side of ``safactory serve``: the app (``app.py``), its one page (``index.html``)
and the episode reader (``episode.py``)."""
