"""Published (or a user's own) measured training runs, read from a YAML file and evaluated with
archplace: :mod:`archplace.validation.runs`."""
