"""The data-agent Space's server package (see app.py)."""
